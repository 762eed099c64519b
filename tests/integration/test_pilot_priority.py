"""A pilot changes no other job's place in Slurm's queue (issue 40, item 2), on the real testbed.

``limits.accounts = [acct_a, acct_b]``: the root account's jobs run on every GPU; pending jobs of all three
accounts get priorities 100 apart through ``nice`` (``scontrol update``), interleaved, acct_a's in the order
opposite to the fair plan's (its oldest job lowest). One ``slurm-fair daemon --once`` round, then Slurm is read
(``squeue -o %Q``, ``sprio -o %S``): acct_c's jobs have no SiteFactor and each has as many jobs ahead of it as
before; the pilot's jobs hold the pilot's places in the fair plan's order.
Before this change the pilot's jobs got SiteFactors up to 100 000 and stood above every acct_c job.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .scenario import CAPACITY, sf

PILOT = ("acct_a", "acct_b")


def _config(testbed, tmp_path: Path) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), period=300, dry_run=False)
    base.setdefault("limits", {})["accounts"] = list(PILOT)
    base.setdefault("priority", {})["age_floor"] = 0
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def _queue(testbed) -> dict[int, tuple[str, int, int]]:
    """Pending job -> (account, priority, SiteFactor), read from squeue and sprio."""
    prio = {}
    for line in testbed.run(["squeue", "-h", "-t", "PD", "-o", "%i|%a|%Q"]).stdout.split():
        jid, acct, p = line.split("|")
        prio[int(jid)] = (acct, int(p))
    site = {}
    for line in testbed.run(["sprio", "-h", "-o", "%i|%S"]).stdout.split():
        jid, s = line.split("|")
        site[int(jid)] = int(s)
    return {j: (a, p, site.get(j, 0)) for j, (a, p) in prio.items()}


def _ahead(prio: dict[int, int], n: int) -> tuple[int, int]:
    """(jobs strictly above n, jobs equal to n) by priority."""
    return sum(p > prio[n] for p in prio.values()), sum(p == prio[n] for p in prio.values())


def test_a_pilot_round_keeps_every_other_jobs_place(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)
    # the root account's jobs hold every GPU (no account of the test gains usage, so fair-share stays put)
    fill = [testbed.sbatch("root", gpu_type=t, name="fill") for t, n in CAPACITY.items() for _ in range(n)]
    testbed.wait_for(lambda: sum(testbed.job_state(j)[0] == "RUNNING" for j in fill) == len(fill), 60,
                     what="the root account's jobs on every GPU")
    # Slurm's own priorities, set through nice 100 apart below the lowest of the three accounts' (high to low):
    # a3 c1 a2 b1 c2 a1 c3 b2 — acct_a's newest job first, its oldest (a1) below two of acct_c's
    names = ["a1", "a2", "a3", "b1", "b2", "c1", "c2", "c3"]
    ids = {n: testbed.sbatch(f"acct_{n[0]}", gpu_type="a100", name="wait") for n in names}
    testbed.wait_scheduled()
    plain = _queue(testbed)
    top = min(p for _a, p, _s in plain.values()) - 100
    rank = ["a3", "c1", "a2", "b1", "c2", "a1", "c3", "b2"]
    for i, n in enumerate(rank):
        jid = ids[n]
        testbed.run(["scontrol", "update", f"jobid={jid}", f"nice={plain[jid][1] - (top - 100 * i)}"])
    before = _queue(testbed)
    assert [before[ids[n]][1] for n in rank] == [top - 100 * i for i in range(len(rank))]
    assert all(s == 0 for _a, _p, s in before.values())

    sf(testbed, cfg, "daemon", "--once")
    with Store(tmp_path / "sf.sqlite") as store:
        r = store.round()
    assert r.status == "ok", r
    after = _queue(testbed)
    outside = [ids[n] for n in ("c1", "c2", "c3")]
    assert all(after[j][2] == 0 for j in outside)  # no SiteFactor outside the pilot
    final = {j: p for j, (_a, p, _s) in after.items()}
    # the fair plan (deficits equal in a first round: acct_a, whose best job is highest, then acct_b; the longest
    # waiting first within each) takes the pilot's places a3 a2 b1 a1 b2 in turn: a1 a2 a3 b1 b2
    assert sorted(ids, key=lambda n: -final[ids[n]]) == ["a1", "c1", "a2", "a3", "c2", "b1", "c3", "b2"]
    assert {n: after[ids[n]][2] for n in ("a1", "a2", "a3", "b1", "b2")} == \
        {"a1": 500, "a2": 0, "a3": -300, "b1": -200, "b2": 0}
    # every acct_c job has as many jobs ahead of it as before the round: 1, 4 and 6
    ahead = {n: _ahead(final, n)[0] for n in outside}
    assert ahead == {n: _ahead({j: p for j, (_a, p, _s) in before.items()}, n)[0] for n in outside}
    assert list(ahead.values()) == [1, 4, 6]
