"""High availability with a real backup controller (issue 40, item 7): a cluster of its own (``sfha``: one
node, two GPU types) beside the testbed, sharing only its munged and slurmdbd, with a primary and a backup
``slurmctld`` (``SlurmctldHost`` twice) on two "hosts": each controller runs in its own UTS and mount namespace
(``unshare``: its own host name, its own /etc/hosts naming its address, its own local folder for pid file and
log), listening on its own loopback address (127.0.0.2, 127.0.0.3); ``StateSaveLocation`` and slurm-fair's
database and ownership file lie in a folder both see (this machine's disk standing for the shared storage), each
host's type map on its own "local disk". A slurm-fair daemon beside each (``only_on_primary``, ``host_id`` = its
controller's name, its own ``<database>.lock``), period 20 s.

1. Killed at once (SIGKILL): the primary ``slurmctld`` and its daemon. The backup ``slurmctld`` takes control
   with the jobs, the backup's daemon — standing by until then, no round — takes the lease and runs a round
   within 2 periods of the kill, no limit is written twice (no round rewrites a value in place, the backup's
   write nothing Slurm had) and none is taken for the site's (the accounts had no limits: every site limit
   recorded is empty); Slurm's limits are what the store says slurm-fair wrote.
2. Fencing: the primary's daemon stalls before applying, past its lease, while its slurmctld dies: the backup's
   daemon takes over and writes; the stalled one records its round "the lease was lost" and writes nothing.

Skipped, with the reason, where ``unshare`` cannot make the namespaces, and in the 24.11 chroot (not tried
there)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fair.store import Store

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
CLUSTER = "sfha"
CTL = {"sfha-ctl1": "127.0.0.2", "sfha-ctl2": "127.0.0.3"}
NODE = "ha-1"
ACCOUNTS = {"ha_fast": "alice", "ha_flat": "bob"}
PROFILES = {"fast": {"v100": 10.0, "k80": 1.0}, "flat": {"v100": 1.1, "k80": 1.0}}
CLASS_OF = {"ha_fast": "fast", "ha_flat": "flat"}
PERIOD = 20
COPIED = ("AuthType", "AuthInfo", "CredType", "AccountingStorageType", "AccountingStorageHost",
          "AccountingStoragePort", "AccountingStoragePass", "SwitchType")


def _port_base(base_conf: str) -> int:
    """Past the testbed's own ports (its SlurmctldPort and the next 7)."""
    ports = [int(ln.split("=", 1)[1]) for ln in base_conf.splitlines() if ln.startswith("SlurmctldPort=")]
    return (ports[0] if ports else 16817) + 13


def _namespaces_work() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare (util-linux) for the controllers' UTS and mount namespaces"
    r = subprocess.run(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                        "hostname sfha-probe && mount --bind /tmp /mnt && hostname"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or r.stdout.strip() != "sfha-probe":
        return f"unshare --uts --mount does not work here: {r.stderr.strip() or r.stdout.strip()}"
    return None


def _write_conf(base_conf: Path, d: Path, shared: Path) -> Path:
    text = base_conf.read_text()
    copied = [ln for ln in text.splitlines() if ln.split("=", 1)[0] in COPIED]
    port = _port_base(text)
    (d / "etc").mkdir(parents=True)
    (d / "dev").mkdir()
    (d / "spool" / NODE).mkdir(parents=True)
    for i in range(4):
        (d / "dev" / f"nvidia{i}").touch()
    (shared / "state").mkdir(parents=True)
    (shared / "sf").mkdir()
    conf = d / "etc" / "slurm.conf"
    conf.write_text("\n".join([
        f"ClusterName={CLUSTER}",
        *(f"SlurmctldHost={h}({a})" for h, a in CTL.items()),
        f"SlurmctldPort={port}", f"SlurmdPort={port + 1}",
        "SlurmctldTimeout=6", "SlurmUser=root", "SlurmdUser=root", *copied,
        f"StateSaveLocation={shared}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/local/slurmctld.pid",  # each controller's own folder (bind-mounted: its local disk)
        f"SlurmctldLogFile={d}/local/slurmctld.log",
        f"SlurmdPidFile={d}/slurmd-%n.pid", f"SlurmdLogFile={d}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none", "SlurmdParameters=config_overrides", "MailProg=/bin/true", "ReturnToService=2",
        "KillWait=2", "InactiveLimit=0", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "GresTypes=gpu", "SchedulerParameters=sched_interval=1,bf_interval=1",
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStorageTRES=gres/gpu,gres/gpu:v100,gres/gpu:k80",
        "PriorityType=priority/multifactor", "PriorityWeightFairshare=10000",
        "CommunicationParameters=NoCtldInAddrAny",
        f"NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port + 2} CPUs=8 RealMemory=16000 "
        "Gres=gpu:v100:2,gpu:k80:2",
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    (d / "etc" / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={NODE} Name=gpu Type=v100 File={d}/dev/nvidia[0-1]\n"
        f"NodeName={NODE} Name=gpu Type=k80 File={d}/dev/nvidia[2-3]\n")
    return conf


def _start_controller(host: str, d: Path, env: dict[str, str]) -> subprocess.Popen:
    """slurmctld on "host" ``host``: its own host name, /etc/hosts and local folder (namespaces)."""
    local = d / host
    local.mkdir(exist_ok=True)
    hosts = local / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{CTL[host]} {host}\n")
    script = ('mount --bind "$1" /etc/hosts && mkdir -p "$3/local" && mount --bind "$2" "$3/local" && '
              'hostname "$4" && exec slurmctld -D -i')
    log = open(local / "slurmctld.out", "w")
    return subprocess.Popen(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                             str(hosts), str(local), str(d), host], env=env, stdout=log, stderr=subprocess.STDOUT)


def _ping(env: dict[str, str]) -> str:
    return subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=30).stdout


def _wait(pred, timeout: float, what: str, interval: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _limits(env: dict[str, str]) -> dict[str, dict[str, int]]:
    out = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={CLUSTER}",
                          "format=account,user,grptres"], env=env, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    limits: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        acct, user, tres = (line.split("|") + ["", ""])[:3]
        if user or acct not in ACCOUNTS:
            continue
        row = limits.setdefault(acct, {})
        for item in filter(None, tres.split(",")):
            k, _, v = item.partition("=")
            row["*" if k == "gres/gpu" else k.split(":", 1)[1]] = int(v)
    return limits


def _node_idle(env: dict[str, str], d: Path) -> None:
    """Wait for the node to be idle (resumed once if it registered drained or down); else fail with Slurm's view."""
    def state() -> str:
        return subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%t"], env=env, capture_output=True, text=True,
                              timeout=30).stdout.strip()

    try:
        _wait(lambda: state() == "idle", 45, "the node idle")
        return
    except AssertionError:
        subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"], env=env, capture_output=True,
                       timeout=30)
    try:
        _wait(lambda: state() == "idle", 30, "the node idle (resumed)")
    except AssertionError:
        why = subprocess.run(["sinfo", "-R", "-N", "-l"], env=env, capture_output=True, text=True, timeout=30)
        tails = "".join(f"\n--- {f}:\n" + "\n".join(f.read_text(errors="replace").splitlines()[-8:])
                        for f in (d / "slurmd-ha-1.log", d / "sfha-ctl1" / "slurmctld.log") if f.exists())
        raise AssertionError(f"node {NODE} is {state()!r}, not idle: {why.stdout}{why.stderr}{tails}") from None


def _sacctmgr(env: dict[str, str], *args: str, check: bool = True) -> None:
    try:
        r = subprocess.run(["sacctmgr", "-i", *args], env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        if check:
            raise
        return
    if check and r.returncode != 0:
        raise AssertionError(f"sacctmgr {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")


def _cancel_all(env: dict[str, str]) -> None:
    ids = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                         timeout=30).stdout.split()
    if ids:
        subprocess.run(["scancel", *ids], env=env, capture_output=True, timeout=30)
        _wait(lambda: not subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                                         timeout=30).stdout.strip(), 30, "the jobs gone")


@pytest.fixture
def ha(testbed):
    why = _namespaces_work()
    if why:
        pytest.skip(why)
    if testbed.release != "bookworm":
        pytest.skip("the two-controller cluster is tried on the host's Slurm (22.05) only: not tried in the "
                    f"{testbed.release} chroot yet")
    # under the testbed's state folder, which the test users can reach (their jobs' scripts lie in the spool)
    root = Path(testbed.state_dir) / "ha-backup"
    shutil.rmtree(root, ignore_errors=True)  # own state: whatever an earlier run left
    d, shared = root / "ha", root / "shared"
    conf = _write_conf(Path(testbed.env["SLURM_CONF"]), d, shared)
    env = dict(testbed.env, SLURM_CONF=str(conf))
    # own state: the cluster and its accounts may be left from an earlier run (added again: "exists" is fine)
    _sacctmgr(env, "add", "cluster", CLUSTER, check=False)
    for acct, user in ACCOUNTS.items():
        _sacctmgr(env, "add", "account", acct, f"cluster={CLUSTER}", check=False)
        _sacctmgr(env, "add", "user", user, f"account={acct}", f"cluster={CLUSTER}", check=False)
    _sacctmgr(env, "modify", "account", "where", f"name={','.join(ACCOUNTS)}", f"cluster={CLUSTER}", "set",
              "GrpTRES=gres/gpu=-1,gres/gpu:v100=-1,gres/gpu:k80=-1", check=False)  # no site limit
    assert _limits(env) == {a: {} for a in ACCOUNTS}  # before slurmctld starts: it loads them so
    procs: dict[str, subprocess.Popen] = {}
    try:
        for host in CTL:
            procs[host] = _start_controller(host, d, env)
        procs["slurmd"] = subprocess.Popen(["slurmd", "-D", "-N", NODE], env=env, stdout=subprocess.DEVNULL,
                                           stderr=open(d / "slurmd.out", "w"))
        _wait(lambda: _ping(env).count("is UP") == 2, 60, "both controllers UP")
        _node_idle(env, d)
        _sacctmgr(env, "show", "runawayjobs", f"cluster={CLUSTER}", check=False)  # an earlier run's, ended
        yield env, d, shared, procs
    finally:
        try:
            _cancel_all(env)
            _sacctmgr(env, "show", "runawayjobs", f"cluster={CLUSTER}", check=False)
        except Exception:  # noqa: BLE001 - no controller left to ask: the next run ends them
            pass
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        _sacctmgr(env, "delete", "cluster", CLUSTER, check=False)


def _daemon_cfg(shared: Path, d: Path, host: str) -> Path:
    p = d / f"{host}.toml"
    p.write_text(f'[daemon]\nperiod = {PERIOD}\nearly_round_after = 1\ndatabase = "{shared}/sf/sf.sqlite"\n'
                 f'host_id = "{host}"\nonly_on_primary = true\ndry_run = false\n'
                 '[policy]\nname = "oef-coop"\n[cluster]\nbackend = "cli"\ntimeout = 5\n'
                 f'[limits]\nlend = false\nownership_file = "{shared}/sf/limits.json"\n'
                 f'[submit]\ntype_map = "{d}/{host}/gpu_type_map.txt"\n'  # each host's local disk
                 '[metrics]\nlisten = ""\n')
    return p


def _workload(env: dict[str, str], shared: Path, jobdir: Path) -> tuple[list[int], float]:
    """Profiles set; ha_flat on every GPU (nobody else waited), then ha_fast, whose jobs gain most from the
    V100s, waiting for them. Returns the job ids and when the last was submitted."""
    with Store(shared / "sf" / "sf.sqlite") as st:
        for cls, thr in PROFILES.items():
            for g, v in thr.items():
                st.set_profile(cls, g, v)
    jobs = []

    def submit(acct: str, gpu_type: str, n: int) -> None:
        for _ in range(n):
            out = subprocess.run(["sbatch", f"--uid={ACCOUNTS[acct]}", "--parsable", f"--account={acct}",
                                  f"--job-name={CLASS_OF[acct]}", f"--gres=gpu:{gpu_type}:1",
                                  f"--chdir={jobdir}", "--output=/dev/null", "--wrap", "sleep 600"],
                                 env=env, capture_output=True, text=True, timeout=30, check=True)
            jobs.append(int(out.stdout.strip().split(";")[0]))

    submit("ha_flat", "v100", 3)
    submit("ha_flat", "k80", 3)
    _wait(lambda: subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], env=env, capture_output=True,
                                 text=True).stdout.count("\n") == 4, 60, "ha_flat on every GPU")
    submit("ha_fast", "v100", 3)
    return jobs, time.time()


def _wait_job_state_saved(shared: Path, since: float) -> None:
    """The primary saved its job state where the backup reads it (a real failover keeps the jobs)."""
    job_state = shared / "state" / "job_state"
    _wait(lambda: job_state.exists() and job_state.stat().st_mtime >= since, 120, "the job state saved")


def _start_daemon(host: str, shared: Path, d: Path, env: dict[str, str], log) -> subprocess.Popen:
    """slurm-fair's daemon beside ``host``'s slurmctld. Its ``<database>.lock`` is its host's own file (bind-mounted
    in a mount namespace of its own): on one machine a flock would always reach the other "host", as NFSv4's
    does (a stalled daemon's lock file then holds the other one off: safe, not what this test is about); with
    ``local_lock=flock`` or local locks it does not, and only the lease keeps the two apart."""
    lock = shared / "sf" / "sf.sqlite.lock"
    lock.touch(mode=0o600)
    own = d / host / "sf.sqlite.lock"
    own.touch(mode=0o600)
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(own), str(lock),
                             *PY, "daemon", "--config", str(_daemon_cfg(shared, d, host))],
                            env=env, stdout=subprocess.DEVNULL, stderr=log)


def _stop(daemons: dict[str, subprocess.Popen]) -> None:
    for p in daemons.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in daemons.values():
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def test_the_backup_controller_and_its_daemon_take_over_within_two_periods(ha, testbed):
    env, d, shared, procs = ha
    jobs, submitted = _workload(env, shared, testbed.jobdir)
    logs = {h: open(d / f"daemon-{h}.log", "w+") for h in CTL}
    daemons = {h: _start_daemon(h, shared, d, env, logs[h]) for h in CTL}
    try:
        with Store(shared / "sf" / "sf.sqlite") as st:
            _wait(lambda: st.written(), 120, "the primary's daemon's first round that writes limits")
            assert st.leader().host == "sfha-ctl1"
            written = st.written()
        assert written, "the primary's round wrote no limit: nothing to take over"
        assert _limits(env) == {a: {k: v for k, v in w.items() if v >= 0} for a, w in written.items()}

        _wait_job_state_saved(shared, submitted)
        # the primary host dies: its slurmctld and its daemon, at once
        killed = time.time()
        procs["sfha-ctl1"].kill()
        daemons["sfha-ctl1"].kill()
        subprocess.run(["pkill", "-KILL", "-P", str(procs["sfha-ctl1"].pid)], capture_output=True)
        before = _limits(env)
        _wait(lambda: "Slurmctld(backup) at sfha-ctl2 is UP" in _ping(env)
              and "Slurmctld(primary) at sfha-ctl1 is DOWN" in _ping(env), 60, "the backup slurmctld serving")
        serving = time.time() - killed
        queued = _wait(lambda: subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                                              text=True).stdout.split(), 30, "the backup answering squeue")
        assert sorted(map(int, queued)) == sorted(jobs)  # the backup took the jobs over from the shared state

        def taken_over():
            with Store(shared / "sf" / "sf.sqlite") as st:
                after = [r for r in st.rounds(details=False) if r.started >= killed and r.status == "ok"]
                return after if after and st.leader().host == "sfha-ctl2" else None

        after = _wait(taken_over, 3 * PERIOD, "a round of the backup's daemon")
        took = after[-1].started - killed
        assert took <= 2 * PERIOD, f"the backup's daemon took over {took:.1f} s after the kill"
        time.sleep(2)
        with Store(shared / "sf" / "sf.sqlite") as st:
            rounds = st.rounds(limit=1000, details=False)
            # no limit written twice: no round rewrote a value in place, and the backup's rounds change nothing
            # Slurm already had when the primary died
            for r in rounds:
                for row in st.applied(r.id):
                    assert row.old != row.new, row
                    if r.started >= killed:
                        assert before.get(row.account, {}).get(row.key) != row.new, row
            # none taken for the site's: the accounts had no limit before slurm-fair
            assert all(not v for v in st.site_limits().values()), st.site_limits()
            assert _limits(env) == {a: {k: v for k, v in w.items() if v >= 0} for a, w in st.written().items()}
        # the map on each controller's local disk: the backup's daemon published its own at its first round
        assert (d / "sfha-ctl2" / "gpu_type_map.txt").read_text().startswith("#@map ")
        logs["sfha-ctl2"].seek(0)
        backup_log = logs["sfha-ctl2"].read()
        pre, _, post = backup_log.partition("lease taken")
        assert "standby: slurmctld primary at sfha-ctl1 serves the cluster" in pre
        assert not re.search(r"round \d+: status=", pre)  # it ran no round while the primary served
        assert pre.count("refusing to run rounds: the database's lease is held by the slurm-fair daemon on "
                         "sfha-ctl1") == 1  # waiting for the dead daemon's lease: said once
        assert post and backup_log.count("lease taken") == 1
        print(f"backup slurmctld serving {serving:.1f} s after the kill; backup daemon's first round "
              f"{after[-1].started - killed:.1f} s after it (period {PERIOD} s)")
    finally:
        _stop(daemons)


def test_a_daemon_that_stalled_past_its_lease_writes_nothing_once_the_backup_took_over(ha, testbed):
    """Fencing: the primary's daemon stalls between solving and applying (SLURM_FAIR_PAUSE_BEFORE_APPLY = 45 s,
    past its 30-s lease) while its slurmctld dies; the backup's daemon takes the lease and writes its limits; the
    stalled daemon, going on, finds the lease in the other's hands and records and writes nothing."""
    env, d, shared, procs = ha
    jobs, submitted = _workload(env, shared, testbed.jobdir)
    _wait_job_state_saved(shared, submitted)
    logs = {h: open(d / f"daemon-{h}.log", "w+") for h in CTL}
    extra = {"sfha-ctl1": {"SLURM_FAIR_PAUSE_BEFORE_APPLY": "45"}, "sfha-ctl2": {}}
    daemons = {h: _start_daemon(h, shared, d, dict(env, **extra[h]), logs[h]) for h in CTL}

    def log(h: str) -> str:
        logs[h].seek(0)
        return logs[h].read()

    try:
        _wait(lambda: "pausing 45 s before apply" in log("sfha-ctl1"), 60, "the primary's daemon stalled")
        procs["sfha-ctl1"].kill()  # its slurmctld dies meanwhile
        _wait(lambda: "round " in log("sfha-ctl2") and "status=ok" in log("sfha-ctl2"), 3 * PERIOD,
              "the backup's daemon's round")
        with Store(shared / "sf" / "sf.sqlite") as st:
            assert st.leader().host == "sfha-ctl2"
            written = st.written()
        assert written  # the backup's daemon wrote its limits
        _wait(lambda: "the lease was lost" in log("sfha-ctl1"), 60, "the stalled daemon going on")
        time.sleep(1)
        with Store(shared / "sf" / "sf.sqlite") as st:
            stalled = [r for r in st.rounds(limit=1000, details=False) if r.message and "lease was lost" in r.message]
            assert len(stalled) == 1 and stalled[0].status == "unreachable", stalled
            assert st.applied(stalled[0].id) == []  # it wrote nothing into Slurm
            assert st.written() == written  # nor over the backup's record
            assert all(not v for v in st.site_limits().values())  # nor took the backup's limits for the site's
        assert _limits(env) == {a: {k: v for k, v in w.items() if v >= 0} for a, w in written.items()}
        primary = log("sfha-ctl1")
        assert primary.count("status=ok") == 0  # the stalled round was its only one: nothing it applied
    finally:
        _stop(daemons)
