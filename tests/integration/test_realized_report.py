"""``slurm-fair report``'s realized fairness on the real testbed (Slurm 22.05 and 24.11), in shadow mode: two
accounts run jobs of known GPUs on known types, the hooks record their starts and ends, dry-run rounds record the
weights and the capacity, and the report's realized share ratios and throughput shares equal the values worked out
here from the times ``sacct`` reports, within 1 %.

The schedule (all GPU types named, so Slurm places every job on the type asked for): acct_b fills the six K80s
(a job of 4, which fits no share of 3 and so never makes acct_b backlogged, and one of 2); acct_a runs 2 A100s
(class ``rz-fast``, profiled here: A100 2×, V100 1.5× a K80) and submits 2 K80s, which wait; acct_b submits
1 more K80, which waits. Both accounts are backlogged until acct_b's first jobs end.

The hand computation (:func:`_expected`), independent of ``fairness/realized.py``: the accounts weigh 1 each (both
in the round, Shares 1), so each one's share is half of every type (A100 2, V100 3, K80 3). An account is
backlogged while one of its jobs of at most 3 GPUs (one that fits a share: it could run) is pending (submit to
start); its entitled rate is its share's value at its class's speeds, fastest type first, up to D, the GPUs of its
jobs in the system that fit a share — one class per account here, so the per-job program is that greedy (acct_a:
2·min(2, D) + 1.5·min(3, D − 2) + min(3, D − 5); acct_b, unprofiled: min(D, 8), its 4-GPU job left out of D);
its received rate is its running jobs' GPUs times their speed on their type, every job's. Each episode's ratio is ∫received / ∫entitled, the account's
ratio their time-weighted mean; its throughput share is ∫received over the window over both accounts'.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fair import config as config_mod

from .conftest import GPUS

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
FAST = {"a100": 2.0, "v100": 1.5, "k80": 1.0}  # rz-fast's speeds (set as throughputs 20, 15, 10 below)
SHARE = {g: sum(n.get(g, 0) for n in GPUS.values()) / 2 for g in ("a100", "v100", "k80")}  # 2, 3, 3


def _cli(testbed, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([*PY, *args], env=testbed.env, capture_output=True, timeout=120)
    assert r.returncode == 0, (args, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")[-3000:])
    return r


def _config(tmp_path: Path, spool: Path) -> Path:
    cfg = {"daemon": {"database": str(tmp_path / "sf.sqlite"), "period": 300, "dry_run": True},
           "cluster": {"backend": "cli"}, "hooks": {"spool": str(spool)}, "metrics": {"listen": ""}}
    path = tmp_path / "sf.toml"
    path.write_text(config_mod.render(config_mod.from_dict(cfg).as_dict()))
    return path


def _sacct(testbed, job: int) -> tuple[float, float, float]:
    out = testbed.run(["sacct", "-n", "-P", "-X", "-j", str(job), "-o", "Submit,Start,End"]).stdout.split("\n")[0]
    return tuple(datetime.datetime.fromisoformat(t).timestamp() for t in out.split("|"))  # type: ignore[return-value]


def _entitled(account: str, demand: int) -> float:
    if account == "acct_b":
        return float(min(demand, sum(SHARE.values())))
    left, value = demand, 0.0
    for g in ("a100", "v100", "k80"):  # fastest first
        take = min(SHARE[g], max(left, 0))
        value += take * FAST[g]
        left -= take
    return value


def _expected(jobs: dict[int, tuple[str, int, str, float]], times: dict[int, tuple[float, float, float]],
              t0: float, t1: float) -> dict[str, tuple[float, float]]:
    """account -> (time-weighted realized share ratio, throughput share), worked out from Slurm's times (module
    docstring). ``jobs``: id -> (account, GPUs, type, speed); ``times``: id -> (submit, start, end)."""
    cuts = sorted({t0, t1, *(t for ts in times.values() for t in ts if t0 < t < t1)})
    out: dict[str, list] = {a: [] for a in ("acct_a", "acct_b")}  # per account: episodes [received, entitled, length]
    received = {a: 0.0 for a in out}
    for lo, hi in zip(cuts, cuts[1:]):
        mid = (lo + hi) / 2
        for a in out:
            mine = [j for j, (acct, *_r) in jobs.items() if acct == a]
            in_system = [j for j in mine if times[j][0] <= mid < times[j][2]]
            rate = sum(jobs[j][1] * jobs[j][3] for j in mine if times[j][1] <= mid < times[j][2])
            received[a] += rate * (hi - lo)
            backlogged = any(times[j][0] <= mid < times[j][1] and jobs[j][1] <= 3 for j in mine)
            if not backlogged:
                if out[a] and out[a][-1][3]:
                    out[a][-1][3] = False  # the episode ended
                continue
            if not out[a] or not out[a][-1][3]:
                out[a].append([0.0, 0.0, 0.0, True])
            ep = out[a][-1]
            ep[0] += rate * (hi - lo)
            ep[1] += _entitled(a, sum(jobs[j][1] for j in in_system if jobs[j][1] <= 3)) * (hi - lo)
            ep[2] += hi - lo
    total = sum(received.values())
    return {a: (sum(e[0] / e[1] * e[2] for e in eps) / sum(e[2] for e in eps), received[a] / total)
            for a, eps in out.items()}


def test_report_gives_the_realized_share_ratios_worked_out_from_slurms_times(testbed, tmp_path):
    spool = config_mod.load(testbed.env["SLURM_FAIR_CONFIG"]).spool_path
    if spool is None:
        pytest.skip("this testbed's slurm-fair.toml has no [hooks] spool")
    testbed.cancel_all()  # an earlier test's jobs must not hold GPUs in this window
    cfg = _config(tmp_path, spool)
    for g, thr in (("a100", "20"), ("v100", "15"), ("k80", "10")):
        _cli(testbed, "profiles", "set", "rz-fast", g, thr, "--config", str(cfg))
    time.sleep(1.1)
    t0 = float(int(time.time()))  # whole seconds: --since reads them
    jobs: dict[int, tuple[str, int, str, float]] = {}

    def submit(account: str, gpus: int, gtype: str, seconds: int, name: str) -> int:
        j = testbed.sbatch(account, gpus=gpus, gpu_type=gtype, name=name, command=f"sleep {seconds}")
        jobs[j] = (account, gpus, gtype, FAST[gtype] if name == "rz-fast" else 1.0)
        return j

    b_big = submit("acct_b", 4, "k80", 20, "rz-flat")
    b_small = submit("acct_b", 2, "k80", 20, "rz-flat")
    a_run = submit("acct_a", 2, "a100", 8, "rz-fast")
    testbed.wait_for(lambda: all(testbed.job_state(j)[0] == "RUNNING" for j in (b_big, b_small, a_run)), 60,
                     what="acct_b's K80 jobs and acct_a's A100 job running")
    a_wait = submit("acct_a", 2, "k80", 3, "rz-fast")
    b_wait = submit("acct_b", 1, "k80", 3, "rz-flat")
    testbed.wait_scheduled()
    assert {testbed.job_state(j)[0] for j in (a_wait, b_wait)} == {"PENDING"}  # the K80s are full
    _cli(testbed, "daemon", "--once", "--config", str(cfg))  # a shadow round: weights, capacity; ingests starts

    def done():
        names = {p.name for p in spool.glob("*.json")}
        return all(f"{j}.0.end.epilog_slurmctld.json" in names for j in jobs) and not testbed.job_ids()

    testbed.wait_for(done, 90, what="every job ended and its end record written")
    _cli(testbed, "daemon", "--once", "--config", str(cfg))  # ingests the end records
    times = {j: _sacct(testbed, j) for j in jobs}
    t1 = float(int(max(t[2] for t in times.values()))) + 2
    assert t0 <= min(t[0] for t in times.values())
    iso = [datetime.datetime.fromtimestamp(t).isoformat(timespec="seconds") for t in (t0, t1)]
    rep = json.loads(_cli(testbed, "report", "--json", "--since", iso[0], "--until", iso[1],
                          "--config", str(cfg)).stdout)
    r = rep["realized"]
    assert "error" not in r, r
    assert (r["since"], r["until"]) == (t0, t1)
    assert r["left_out"] == [] and r["no_submit"] == [] and r["runs"] == 5, r
    assert r["pending"] == [], r  # every job started: none is counted from the rounds' sightings alone
    assert r["unprofiled"] == ["rz-flat"], r  # said in the output: speed 1 on every type
    want = _expected(jobs, times, t0, t1)
    for a, (ratio, share) in want.items():
        got = r["accounts"][a]
        assert got["weight"] == 1.0
        assert got["ratio"] == pytest.approx(ratio, rel=0.01), (a, got, ratio, times)
        assert got["throughput_share"] == pytest.approx(share, rel=0.01), (a, got, share)
        assert got["jobs_ended"] == sum(1 for acct, *_r in jobs.values() if acct == a)
    # the hand numbers are not trivial: acct_a got well under its share while it waited for K80s (its A100 job
    # ended before); acct_b held 6 K80s against an entitlement of 3 (its 2- and 1-GPU jobs: the 4-GPU one fits no
    # share of 3, so it is received but never owed: about 6 / 3)
    assert want["acct_a"][0] < 0.9 and want["acct_b"][0] > 1.5, want
    table = _cli(testbed, "report", "--since", iso[0], "--until", iso[1], "--config", str(cfg)).stdout.decode()
    row = next(ln.split() for ln in table.splitlines() if ln.startswith("acct_a ") and "realized" not in ln
               and len(ln.split()) == 12)
    assert float(row[2]) == pytest.approx(want["acct_a"][0], abs=0.006), table
    assert "no profile (speed 1 on every type): rz-flat\n" in table
