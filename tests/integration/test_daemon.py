"""The slurm-fair daemon against the real testbed: limits written = the rounded plan, the right jobs start,
deviations carried by formula, crash between solve and apply, slurmctld down, apply --dry-run, explain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from slurm_fair.store import Round, Store

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
TYPES = ("a100", "k80", "v100")
CAPACITY = {"a100": 4, "k80": 6, "v100": 6}
# one class per account: a big V100 speedup, almost none, in between (k80 = 1)
PROFILES = {
    "fast": {"v100": 10.0, "k80": 1.0, "a100": 12.0},
    "flat": {"v100": 1.1, "k80": 1.0, "a100": 1.2},
    "mid": {"v100": 3.0, "k80": 1.0, "a100": 4.0},
}
CLASS_OF = {"acct_a": "fast", "acct_b": "flat", "acct_c": "mid"}


@pytest.fixture
def sf(testbed, tmp_path):
    """A config file + database for this test, profiles set, and a runner for the CLI."""
    cfg = tmp_path / "slurm-fair.toml"
    cfg.write_text(
        '[daemon]\nperiod = 3\nearly_round_after = 1\ndatabase = "sf.sqlite"\ndry_run = false\n'
        '[policy]\nname = "oef-coop"\n[cluster]\nbackend = "cli"\ntimeout = 15\n'
    )
    store = Store(tmp_path / "sf.sqlite")
    for cls, thr in PROFILES.items():
        for g, v in thr.items():
            store.set_profile(cls, g, v)

    class SF:
        path = cfg
        db = store

        @staticmethod
        def cli(*args, check=True, env=None, timeout=120):
            e = dict(testbed.env)
            e.update(env or {})
            r = subprocess.run([*PY, *args, "--config", str(cfg)], env=e, capture_output=True, text=True,
                               timeout=timeout)
            if check and r.returncode != 0:
                raise AssertionError(f"slurm-fair {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
            return r

        @staticmethod
        def popen(*args, env=None):
            e = dict(testbed.env)
            e.update(env or {})
            return subprocess.Popen([*PY, *args, "--config", str(cfg)], env=e, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)

    yield SF
    store.close()


def slurm_limits(testbed) -> dict[str, dict[str, int]]:
    return testbed.gpu_limits(tuple(CLASS_OF))


def submit_mix(testbed, per_type: dict[str, int], accounts=tuple(CLASS_OF)) -> dict[tuple[str, str], list[int]]:
    """Typed 1-GPU jobs per account; class = the account's class (job name)."""
    jobs: dict[tuple[str, str], list[int]] = {}
    for a in accounts:
        for g, n in per_type.items():
            for _ in range(n):
                jobs.setdefault((a, g), []).append(
                    testbed.sbatch(account=a, gpus=1, gpu_type=g, name=CLASS_OF[a]))
    return jobs


def running_by(testbed) -> dict[tuple[str, str], int]:
    out = testbed.run(["squeue", "-h", "-t", "RUNNING", "-o", "%a|%b"]).stdout
    counts: dict[tuple[str, str], int] = {}
    for line in out.splitlines():
        acct, gres = line.split("|")
        g = gres.split(":")[-2] if gres.count(":") >= 2 else "?"
        counts[(acct, g)] = counts.get((acct, g), 0) + 1
    return counts


def last_round(store: Store) -> Round:
    return store.rounds(limit=1)[0]


def planned_limits(rnd: Round) -> dict[str, dict[str, int]]:
    """The limits a round planned for the test's accounts (a type left out: no limit)."""
    return {a: dict(rnd.details["limits"].get(a, {})) for a in CLASS_OF}


def test_rounds_set_the_rounded_plan_start_the_right_jobs_and_carry_deviations(testbed, sf):
    # preemption on (so borrowed GPUs can serve claims), but a 10-minute lease: nothing here is preempted
    sf.path.write_text(sf.path.read_text() + "[preemption]\nenabled = true\nmin_runtime = 600\n")
    # a round with no jobs: nobody waits, so no limit binds anyone (an idle account is never locked out)
    sf.cli("daemon", "--once")
    assert slurm_limits(testbed) == {a: {} for a in CLASS_OF}

    # acct_b takes every GPU (lent: nobody else waits), then acct_a and acct_c submit
    busy = submit_mix(testbed, {"a100": 4, "v100": 6, "k80": 6}, accounts=("acct_b",))
    testbed.wait_for(lambda: sum(running_by(testbed).values()) == 16, timeout=40, what="acct_b on every GPU")
    submit_mix(testbed, {"a100": 1, "v100": 3, "k80": 1}, accounts=("acct_a", "acct_c"))
    testbed.wait_scheduled()
    r = sf.cli("daemon", "--once")
    assert "status=ok" in r.stderr
    rnd = last_round(sf.db)
    assert rnd.status == "ok" and rnd.policy == "oef-coop"
    # the round keeps oef-coop's binding envy rows (its warm start) for the next round, when there are any, and a
    # fingerprint of every class (a changed class's rows are dropped next round)
    saved = rnd.details["warm_start"]["pairs_saved"]
    warm = sf.db.warm_start("oef-coop") or []
    assert len([w for w in warm if w[0] not in ("fp", "x")]) == saved
    assert {(t, c) for w in warm if w[0] == "fp" for t, c in [w[1:3]]} == set(CLASS_OF.items())
    guarantee = {a: {p.gpu_type: p.real for p in sf.db.placements(rnd.id) if p.account == a}
                 for a in CLASS_OF}
    claims = rnd.details["claims"]
    # cooperative OEF guarantees the V100s to the account whose jobs gain most from them; acct_a's waiting
    # jobs claim its guarantee out of what acct_b borrows
    assert guarantee["acct_a"]["v100"] == max(guarantee[a]["v100"] for a in CLASS_OF) >= 3
    assert claims["acct_a"]["v100"] == 3
    for g in TYPES:
        assert sum(claims[a][g] for a in CLASS_OF) <= CAPACITY[g]
    planned = planned_limits(rnd)
    assert slurm_limits(testbed) == planned  # Slurm holds exactly the planned limits
    # acct_b may use what nobody claims: capacity less the others' claims
    for g in TYPES:
        want = CAPACITY[g] - claims["acct_a"][g] - claims["acct_c"][g]
        assert planned["acct_b"].get(g, CAPACITY[g]) == want

    # GPUs acct_b gives back go to the claims, not to more of acct_b's jobs: its new V100 job waits on its limit
    more = testbed.sbatch(account="acct_b", gpus=1, gpu_type="v100", name="flat")
    testbed.run(["scancel", *map(str, busy[("acct_b", "v100")][:3])])
    claimants = lambda: sum(running_by(testbed).get((a, "v100"), 0) for a in ("acct_a", "acct_c"))  # noqa: E731
    testbed.wait_for(lambda: claimants() == 3, timeout=40, what="3 claimed V100 jobs on the GPUs acct_b gave back")
    time.sleep(2)
    # acct_b's new job waits: its V100 limit (capacity less the claims) is no more than the 3 it still runs
    assert testbed.job_state(more)[0] == "PENDING" and planned["acct_b"]["v100"] <= 3
    assert claimants() == 3 and running_by(testbed)[("acct_b", "v100")] == 3

    # second round after more submissions: deviations carried by the formula
    dev1 = sf.db.deviations()
    p1 = {(p.account, p.gpu_type): p for p in sf.db.placements(rnd.id)}
    for (a, g), p in p1.items():
        assert dev1[a][g] == pytest.approx(p.deviation_before + p.ideal - p.real, abs=1e-6)
    submit_mix(testbed, {"v100": 2}, accounts=("acct_b",))
    testbed.wait_scheduled()
    sf.cli("daemon", "--once")
    rnd2 = last_round(sf.db)
    assert rnd2.status == "ok" and rnd2.id == rnd.id + 1
    dev2 = sf.db.deviations()
    for p in sf.db.placements(rnd2.id):
        a, g = p.account, p.gpu_type
        assert p.deviation_before == pytest.approx(dev1[a][g], abs=1e-9)  # carried
        # policy.stable: an ideal that did not move holds last round's guarantee and its deviation (rounding.py)
        held = (a, g) in p1 and abs(p.ideal - p1[(a, g)].ideal) <= 1e-6
        assert dev2[a][g] == pytest.approx(p.deviation_before + (0 if held else p.ideal - p.real), abs=1e-6)
    assert slurm_limits(testbed) == planned_limits(rnd2)

    # explain shows the account's numbers
    ex = json.loads(sf.cli("explain", "acct_a", "--json").stdout)
    assert ex["round"] == rnd2.id and ex["weight"] == 1.0
    assert ex["classes"]["fast"]["throughput"]["v100"] == 10.0 and ex["classes"]["fast"]["source"]["v100"] == "site"
    assert ex["limits_in_slurm"] == planned_limits(rnd2)["acct_a"]
    assert sum(ex["ideal"].values()) == pytest.approx(
        sum(p.ideal for p in sf.db.placements(rnd2.id) if p.account == "acct_a"))
    assert all(j["slurm_fair"] and j["slurm_reason"] for j in ex["pending_jobs"])
    txt = sf.cli("explain", "acct_a").stdout
    assert "fast" in txt and "v100=10(site)" in txt
    st = json.loads(sf.cli("status", "--json").stdout)
    assert st["round"] == rnd2.id and st["accounts"]["acct_a"]["limits"] == ex["limits_in_slurm"]
    assert st["accounts"]["acct_b"]["pending_gpus"] >= 2

    # apply --dry-run changes nothing in Slurm nor in the store's carried state
    submit_mix(testbed, {"k80": 2}, accounts=("acct_c",))
    testbed.wait_scheduled()
    before = (slurm_limits(testbed), sf.db.deviations(), len(sf.db.rounds(limit=100)))
    r = sf.cli("apply", "--dry-run", "--json")
    out = json.loads(r.stdout)
    assert "limit_changes" in out and out["limits"]
    assert (slurm_limits(testbed), sf.db.deviations(), len(sf.db.rounds(limit=100))) == before


def test_sigkill_between_solve_and_apply_then_restart_converges(testbed, sf):
    # preemption on, 10-minute lease: acct_c's waiting jobs claim GPUs acct_a and acct_b borrow, so the round
    # has limits to write (and nothing is preempted)
    sf.path.write_text(sf.path.read_text() + "[preemption]\nenabled = true\nmin_runtime = 600\n")
    sf.cli("daemon", "--once")  # nobody waits: no limits
    base = slurm_limits(testbed)
    submit_mix(testbed, {"a100": 2, "v100": 3, "k80": 3})
    testbed.wait_for(lambda: sum(running_by(testbed).values()) == 16, timeout=40, what="every GPU in use")
    testbed.wait_scheduled()
    proc = sf.popen("daemon", "--once", env={"SLURM_FAIR_PAUSE_BEFORE_APPLY": "60"})
    deadline = time.monotonic() + 60
    line = ""
    while "pausing" not in line:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "daemon exited before pausing"
        assert time.monotonic() < deadline, "daemon did not reach the pause"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert slurm_limits(testbed) == base  # nothing applied
    killed = last_round(sf.db)
    assert killed.status == "running"
    devs_before = sf.db.deviations()
    assert not sf.db.applied(killed.id)

    sf.cli("daemon", "--once")  # restart: converges
    rnd = last_round(sf.db)
    assert rnd.status == "ok"
    assert sf.db.round(killed.id).status == "error"  # marked interrupted
    planned = planned_limits(rnd)
    assert slurm_limits(testbed) == planned and any(planned.values())
    applied = sf.db.applied(rnd.id)
    # each needed change written exactly once, from the value Slurm had before the crash
    keys = [(a.account, a.key) for a in applied]
    assert len(keys) == len(set(keys))
    assert set(keys) == {(a, k) for a, row in planned.items() for k, v in row.items() if base[a].get(k) != v}
    assert all(a.old == base[a.account].get(a.key) for a in applied)
    # the killed round left no trace in the carried state: the recovery round started from the same deviations
    for p in sf.db.placements(rnd.id):
        assert p.deviation_before == pytest.approx(devs_before.get(p.account, {}).get(p.gpu_type, 0.0))


def _slurmctld_pid(testbed) -> int:
    return int((testbed.state_dir / "run" / "slurmctld.pid").read_text().strip())


def test_slurmctld_down_round_unreachable_daemon_survives_and_recovers(testbed, sf):
    if testbed.release != "bookworm":
        pytest.skip("stops and restarts the host's slurmctld: only on the bookworm (22.05, host) testbed")
    sf.cli("daemon", "--once")
    proc = sf.popen("daemon")  # period 3 s
    run_dir = testbed.state_dir / "run"
    try:
        testbed.wait_for(lambda: len(sf.db.rounds(limit=100)) >= 2, timeout=30, what="a daemon round")
        os.kill(_slurmctld_pid(testbed), signal.SIGTERM)
        testbed.wait_for(lambda: last_round(sf.db).status == "unreachable", timeout=60,
                         what="a round recorded as unreachable")
        assert proc.poll() is None  # the daemon survives
        log = open(testbed.state_dir / "log" / "slurmctld.out", "ab")
        ctld = subprocess.Popen(["slurmctld", "-D", "-i"], env=testbed.env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
        (run_dir / "slurmctld.pid").write_text(f"{ctld.pid}\n")
        testbed.wait_for(lambda: testbed.run(["sinfo", "-h"], check=False).returncode == 0, timeout=60,
                         what="slurmctld back")
        n = len(sf.db.rounds(limit=1000))
        new = submit_mix(testbed, {"v100": 1}, accounts=("acct_a",))[("acct_a", "v100")]
        testbed.wait_for(lambda: len(sf.db.rounds(limit=1000)) > n and last_round(sf.db).status == "ok",
                         timeout=60, what="an ok round after slurmctld is back")
        # the new job's account had no share: nothing is held from it (lent GPUs), and a round gives it one
        testbed.wait_state(new[0], "RUNNING", timeout=30)
        testbed.wait_for(lambda: any(p.account == "acct_a" and p.gpu_type == "v100" and p.real >= 1
                                     for p in sf.db.placements(last_round(sf.db).id)), timeout=30,
                         what="acct_a guaranteed a V100")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0  # SIGTERM: the round finishes, exit 0
    assert "round" in proc.stderr.read()


def test_single_instance_sighup_reload_and_sigterm(testbed, sf):
    proc = sf.popen("daemon")
    try:
        testbed.wait_for(lambda: len(sf.db.rounds(limit=10)) >= 1, timeout=30, what="a first round")
        second = sf.cli("daemon", "--once", check=False)
        assert second.returncode == 1 and "another slurm-fair daemon holds" in second.stderr
        good = sf.path.read_text()
        sf.path.write_text(good + "\n[bogus]\nx = 1\n")  # invalid: kept the old config
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.5)
        sf.path.write_text(good.replace('name = "oef-coop"', 'name = "equal-share"'))
        proc.send_signal(signal.SIGHUP)
        testbed.wait_for(lambda: last_round(sf.db).policy == "equal-share", timeout=30,
                         what="a round with the reloaded policy")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert rc == 0
    assert "config reload failed, keeping the old one: bogus" in err
    assert "config reloaded" in err and "stopping" in err
    assert all(r.status != "running" for r in sf.db.rounds(limit=100))  # the last round was finished


@pytest.mark.parametrize("policy", ["bud", "themis", "hadar"])
def test_every_seed_policy_runs_the_daemons_rounds(testbed, sf, policy):
    """policy.name = bud / themis / hadar: rounds apply the rounded plan; bud's prices reach explain, themis
    keeps its state (held GPUs, lease age) across rounds in the store; hadar admits the jobs Slurm shows."""
    sf.path.write_text(sf.path.read_text().replace('name = "oef-coop"', f'name = "{policy}"'))
    submit_mix(testbed, {"a100": 2, "v100": 3, "k80": 3})
    testbed.wait_scheduled()  # every round sees the 16 running and 8 pending jobs, however fast it starts
    sf.cli("daemon", "--once")
    first = last_round(sf.db)
    assert first.status == "ok" and first.policy == policy, first.message
    assert slurm_limits(testbed) == planned_limits(first)
    if policy == "bud":
        prices = first.details["prices"]
        assert set(prices) == set(TYPES) and all(p > 0 for p in prices.values())
        ex = json.loads(sf.cli("explain", "acct_a", "--json").stdout)
        w = first.details["weights"]
        assert ex["prices"] == pytest.approx(prices) and ex["budget"] == pytest.approx(w["acct_a"] / sum(w.values()))
    elif policy == "hadar":
        # every class's 8 typed 1-GPU jobs came from squeue; the 16 GPUs are all guaranteed to someone
        assert sum(p.real for p in sf.db.placements(first.id)) == sum(CAPACITY.values())
    else:
        # one lease per allocation (state version 2), just begun; under the paper's auction a class may get
        # nothing in a round (hidden payments go to the non-bidders only), so not every class need hold one
        state = sf.db.warm_start("themis")
        apps = {app for app, _t, _g, _age in state["leases"]}
        assert state["version"] == 2 and apps and apps <= {f"{a}/{c}" for a, c in CLASS_OF.items()}
        assert all(age == 0.0 for *_x, age in state["leases"]) and set(state["apps"]) >= apps
        leased = {(app, t) for app, t, _g, _age in state["leases"]}
        time.sleep(1)
        sf.cli("daemon", "--once")
        second = last_round(sf.db)
        assert second.status == "ok" and second.id > first.id
        # the first round's leases (600 s) hold, a round older; a class that got nothing then may win free GPUs
        # now, under a lease of its own that starts with this round
        assert leased <= {(app, t) for app, t, _g, age in sf.db.warm_start("themis")["leases"] if age > 0}
        # the same ideal shares (the rounding may still move a GPU: deviations carry between rounds)
        for a, row in first.details["ideal"].items():
            assert second.details["ideal"][a] == pytest.approx(row, abs=1e-6)
