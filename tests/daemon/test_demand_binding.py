"""Issue 41 item 1: demand is what can start (daemon/plan/binding.py), through the round code (``run_round`` on a
cluster double with preemption on) and as the pure rule.

* (1) Two 2-GPU V100 jobs requeued once (restart count 1) whose owner moved their begin time a year ahead: before,
  they were demand (``cluster/blocked.py`` counted any requeued ``BeginTime`` job): their account got a V100 share
  of 2, the two other accounts' V100 limits were lowered to 2 and two of their running jobs were signalled. Now:
  no share, no claim, no limit change, no signal. The same jobs with the begin time Slurm sets at a requeue (121 s
  ahead, due within the round) still are demand and reclaim their guarantee.
* (2) An account the site capped at ``v100=0`` (recorded as its site limit, kept as an upper bound under
  ``limits.site_limits = "adopt"``) whose jobs pend on ``AssocGrpGRES`` for ever: before, it got an ideal share
  of 2 V100 and claimed them, and the other account was held to 2 of the 4 V100 with two idle. Now it is not
  demand (``site-limit``) and the other account may use all four.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from slurm_fair import config
from slurm_fair.cluster.base import ANY_GPU, CLEAR, Account, Snapshot
from slurm_fair.cluster.blocked import BEGIN_TIME, SITE_LIMIT
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.plan import binding
from slurm_fair.daemon.preemption import decide as PR
from slurm_fair.daemon.round import run_round
from slurm_fair.store import Store
from slurm_fair.daemon import status_file
from slurm_fair.views import explain, why
from tests.conftest import NODES, job

T = 1_800_000_000.0  # the snapshot's time (and the round's)
YEAR = 365 * 86400


class _Site:
    """A cluster double: jobs on a V100 node and a K80 node (4 GPUs each), accounts' GPU limits as sacctmgr
    holds them, and the signals and requeues preemption sends."""

    def __init__(self, jobs=(), limits: Mapping[str, Mapping[str, int]] | None = None):
        self.jobs = list(jobs)
        self.accounts = {"acct_a": 1, "acct_b": 1, "acct_c": 1}
        self.limits = {a: dict((limits or {}).get(a, {})) for a in self.accounts}
        self.writes: list[dict[str, dict[str, int]]] = []
        self.signals: list[int] = []

    def snapshot(self):
        accts = tuple(Account(a, s, dict(self.limits.get(a, {}))) for a, s in self.accounts.items())
        return Snapshot("22.05.8", T, NODES, tuple(self.jobs), accts, ("gpu",))

    def cluster_name(self) -> str:
        return "tb"

    def set_accounts_gpu_limits(self, limits):
        self.writes.append({a: dict(ch) for a, ch in limits.items()})
        for a, ch in limits.items():
            row = self.limits.setdefault(a, {})
            for k, v in ch.items():
                if v == CLEAR:
                    row.pop(k, None)
                else:
                    row[k] = int(v)

    def set_site_factors(self, factors):
        pass

    def priority_weights(self):
        return None

    def set_job_gpu_type(self, job_id, gpu_type, gpus_per_node):
        pass

    def signal_job(self, job_id, signal):
        self.signals.append(job_id)

    def requeue_job(self, job_id):
        pass


def _cfg(tmp_path, **limits):
    return config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite"), "dry_run": False,
                                        "status_file": ""},
                             "submit": {"type_map": ""}, "policy": {"name": "equal-share"},
                             "limits": dict(limits),
                             "preemption": {"enabled": True, "min_runtime": 0, "grace": 60}})


def _round(site: _Site, cfg, site_limits=None):
    with Store(cfg.database_path) as st:
        if site_limits:
            st.record_site_limits(site_limits)  # what `slurm-fair limits adopt` records
        res = run_round(site, st, cfg, now=T)
    assert res.status == "ok", res.message
    return res


def _running_b_c():
    """acct_b runs four 1-GPU V100 jobs (all four V100 busy), acct_c two K80 jobs."""
    return [replace(job(10 + i, "acct_b", 1, "v100", state="RUNNING", submit=int(T) - 4000 + i, alloc={"v100": 1}),
                    requeue=True, node_gpus={"v100-1": 1}) for i in range(4)] + [job(20 + i, "acct_c", 1, "k80", state="RUNNING", submit=int(T) - 4000,
                                      alloc={"k80": 1}) for i in range(2)]


def _requeued(begin: float):
    return [replace(job(1 + i, "acct_a", 2, "v100", reason="BeginTime", submit=int(T) - 3000), restart_count=1,
                    blocked=BEGIN_TIME, begin_time=int(begin), requeue=True) for i in range(2)]


def test_requeued_jobs_moved_a_year_ahead_get_no_share_claim_limit_or_signal(tmp_path):
    site = _Site(_running_b_c() + _requeued(T + YEAR))
    res = _round(site, _cfg(tmp_path))
    c = res.decisions
    assert sum(c.plan.ideal.get("acct_a", {}).values()) == 0 and sum(c.plan.real.get("acct_a", {}).values()) == 0
    assert not any(c.plan.claims.get("acct_a", {}).values()) and not c.plan.reclaims
    assert c.not_demand == {"acct_a": {BEGIN_TIME: 4}}
    assert all("v100" not in site.limits[a] for a in ("acct_b", "acct_c"))  # nobody held to 2 V100
    assert site.signals == []


def test_the_same_jobs_on_a_requeue_begin_time_still_reclaim(tmp_path):
    """The control: the begin time Slurm sets at a requeue (cred_expire + 1 = 121 s) is due within the round."""
    site = _Site(_running_b_c() + _requeued(T + 121))
    res = _round(site, _cfg(tmp_path))
    c = res.decisions
    assert c.not_demand == {}
    assert c.plan.real["acct_a"]["v100"] == 2 and c.plan.claims["acct_a"]["v100"] == 2
    assert site.limits["acct_b"]["v100"] == 2 and site.limits["acct_c"]["v100"] == 2


def test_preemption_signals_for_the_due_jobs_only():
    """The preemption decision on the settled snapshot: acct_b runs on all four V100 above its guarantee of 2;
    acct_a's requeued jobs a year ahead signal nobody, the same jobs due within the round signal acct_b's two
    newest."""
    pc = config.from_dict({"preemption": {"enabled": True, "min_runtime": 0}}).preemption
    guarantees = {"acct_a": {"v100": 2}, "acct_b": {"v100": 2}}
    running = _running_b_c()[:4]
    for begin, want in ((T + YEAR, []), (T + 121, [13, 12])):
        s = binding.settle(_snap(running + _requeued(begin), []), T + 300, {})
        d = PR.decide(guarantees, list(s.jobs), [], T, pc)
        assert [a.job_id for a in d.of("signal")] == want


def _capped_site():
    """acct_a is capped by the site at v100=0 and waits with two 1-GPU V100 jobs on AssocGrpGRES; acct_b runs
    two V100 jobs and waits with two more."""
    jobs = [job(1, "acct_a", 1, "v100", reason="AssocGrpGRES"), job(2, "acct_a", 1, "v100", reason="AssocGrpGRES"),
            job(10, "acct_b", 1, "v100", state="RUNNING", submit=int(T) - 4000, alloc={"v100": 1}),
            job(11, "acct_b", 1, "v100", state="RUNNING", submit=int(T) - 3999, alloc={"v100": 1}),
            job(12, "acct_b", 1, "v100", reason="Priority"), job(13, "acct_b", 1, "v100", reason="Priority")]
    return _Site(jobs, limits={"acct_a": {"v100": 0}})


def test_an_account_the_site_capped_claims_nothing_and_holds_nobody_back(tmp_path):
    site = _capped_site()
    res = _round(site, _cfg(tmp_path, site_limits="adopt"), site_limits={"acct_a": {"v100": 0}})
    c = res.decisions
    assert sum(c.plan.ideal.get("acct_a", {}).values()) == 0 and not any(c.plan.claims.get("acct_a", {}).values())
    assert c.not_demand == {"acct_a": {SITE_LIMIT: 2}}
    assert site.limits["acct_a"]["v100"] == 0  # the site's cap stays
    assert site.limits["acct_b"].get("v100", 4) == 4 and site.limits["acct_b"].get(ANY_GPU, 8) >= 4  # all 4 V100
    assert site.signals == []
    cfg = _cfg(tmp_path, site_limits="adopt")
    with Store(cfg.database_path) as st:  # explain settles demand as the round does
        ex = explain.explain(st, cfg, "acct_a", site.snapshot())
    assert ex["not_demand_now"] == {SITE_LIMIT: 2}
    assert {j["job_id"]: j["blocked"] for j in ex["pending_jobs"]} == {1: SITE_LIMIT, 2: SITE_LIMIT}


def test_the_same_jobs_held_by_slurm_fairs_own_limit_are_demand(tmp_path):
    """The control: with no site cap, acct_a's AssocGrpGRES jobs are held by slurm-fair's lending limits — they
    are demand, get a share and claim it."""
    site = _capped_site()
    site.limits = {a: {} for a in site.accounts}
    res = _round(site, _cfg(tmp_path, site_limits="adopt"))
    c = res.decisions
    assert c.not_demand == {} and sum(c.plan.ideal["acct_a"].values()) > 0
    assert c.plan.real["acct_a"].get("v100", 0) == 2


def test_a_site_capped_job_slurm_shows_on_resources_claims_nothing(tmp_path):
    """Measured on the 24.11 testbed: with every V100 busy, Slurm showed the capped jobs on ``Resources`` (not
    ``AssocGrpGRES``) — the site's limit holds them all the same, and they were counted as demand."""
    site = _capped_site()
    site.jobs = [replace(j, reason=r) if j.job_id in (1, 2) else j for j, r in zip(site.jobs, ["Resources", "None"] * 3)]
    res = _round(site, _cfg(tmp_path, site_limits="adopt"), site_limits={"acct_a": {"v100": 0}})
    c = res.decisions
    assert c.not_demand == {"acct_a": {SITE_LIMIT: 2}}
    assert sum(c.plan.ideal.get("acct_a", {}).values()) == 0 and not any(c.plan.claims.get("acct_a", {}).values())
    assert _why(site, res, _cfg(tmp_path, site_limits="adopt"), 1).verdict == "site-limit"


def _why(site: _Site, res, cfg, job_id: int):
    """`slurm-fair why JOBID` as a user runs it: the job from Slurm now and the status file the round published
    (round-tripped through its text)."""
    st = status_file.build_status(site.snapshot(), res.decisions, cfg, round_id=1, round_time=T, round_status="ok",
                                  dry_run=False)
    st = status_file.parse(status_file.render(st))
    return why.explain_job(next(j for j in site.snapshot().jobs if j.job_id == job_id), st, T + 5)


def test_why_says_a_site_capped_job_waits_on_the_sites_limit(tmp_path):
    """Before, `why` said such a job waited on "its account's GPU limit" and that slurm-fair's next round moves
    the limits; the status file now carries each account's site limits (the round's ``site_bounds``)."""
    site = _capped_site()
    cfg = _cfg(tmp_path, site_limits="adopt")
    res = _round(site, cfg, site_limits={"acct_a": {"v100": 0}})
    assert res.decisions.site_bounds == {"acct_a": {"v100": 0}}
    ex = _why(site, res, cfg, 1)
    assert ex.verdict == "site-limit", ex
    assert "a GPU limit the site set on account acct_a" in ex.summary and "gres/gpu:v100=0" in ex.summary
    assert any("the association limit that holds it is the site's" in d for d in ex.details)
    assert "slurm-fair never lifts a site's limit" in ex.changes[0]
    # the control: the same jobs under slurm-fair's own limit wait on "its account's GPU limit"
    site2 = _capped_site()
    site2.limits = {a: {} for a in site2.accounts}
    cfg2 = _cfg(tmp_path / "own", site_limits="adopt")
    res2 = _round(site2, cfg2)
    assert res2.decisions.site_bounds == {}
    assert _why(site2, res2, cfg2, 1).verdict != "site-limit"


# ------------------------------------------------------------------------------------------------ the pure rule


def _snap(jobs, accounts):
    return Snapshot("22.05.8", T, NODES, tuple(jobs), tuple(accounts), ("gpu",))


def test_site_bounds_are_what_slurm_fair_did_not_write_or_the_recorded_site_limit():
    current = {"a": {"v100": 0, ANY_GPU: 6}, "b": {"v100": 2}, "c": {"v100": 1}}
    written = {"a": {"v100": 0}, "b": {"v100": 2}, "c": {"v100": 3}}  # c's was changed by hand since
    recorded = {"a": {"v100": 0}, "b": {"v100": 5}}
    assert binding.site_bounds(current, written, recorded) == {
        "a": {"v100": 0, ANY_GPU: 6}, "b": {"v100": 5}, "c": {"v100": 1}}


def _limited(jid, account, gpus=1, gtype="v100"):
    return job(jid, account, gpus, gtype, reason="AssocGrpGRES")


def test_which_limit_binds():
    run_a = job(9, "a", 1, "v100", state="RUNNING", alloc={"v100": 1})
    accts = [Account("a", 1, {"v100": 2}, parent="p"), Account("b", 1, {}, parent="p"), Account("p", 1, {})]
    h = binding.Holders.of(_snap([run_a], accts))
    # slurm-fair's own v100=2 binds (a holds 1, asks 2): demand; the site's v100=2 binds: not
    assert not binding.site_holds(_limited(1, "a", 2), h, {})
    assert binding.site_holds(_limited(1, "a", 2), h, {"a": {"v100": 2}})
    assert not binding.site_holds(_limited(1, "a", 1), h, {"a": {"v100": 2}})  # 1 + 1 fits the site's
    # a typed site limit does not bind an untyped request (Slurm does not count it there); the total does
    assert not binding.site_holds(_limited(1, "a", 2, None), h, {"a": {"v100": 0}})
    assert binding.site_holds(_limited(1, "a", 2, None), h, {"a": {ANY_GPU: 2}})
    # a multi-type request is held only if every listed type binds
    assert not binding.site_holds(_limited(1, "a", 1, "k80,v100"), h, {"a": {"v100": 0}})
    assert binding.site_holds(_limited(1, "a", 1, "k80,v100"), h, {"a": {"v100": 0, "k80": 0}})
    # a parent's limit counts its whole subtree: b runs nothing, a holds 1 of p's 2
    accts_p = [*accts[:2], Account("p", 1, {"v100": 2})]
    hp = binding.Holders.of(_snap([run_a], accts_p))
    assert binding.site_holds(_limited(2, "b", 2), hp, {}) and not binding.site_holds(_limited(2, "b", 1), hp, {})
    # Slurm names one reason: a job it shows on Priority or Resources that the site's limit holds is held all the
    # same (24.11 shows Resources while no GPU of the type is free); a reason that is not demand is not looked at
    assert binding.site_holds(job(3, "a", 4, "v100", reason="Priority"), h, {"a": {"v100": 0}})
    assert binding.site_holds(job(3, "a", 4, "v100", reason="Resources"), h, {"a": {"v100": 0}})
    assert not binding.site_holds(job(3, "a", 4, "v100", reason="QOSGrpGRES"), h, {"a": {"v100": 0}})


def test_settle_keeps_other_kinds_and_counts_a_limit_that_binds_nobody():
    jobs = [_limited(1, "a", 1), replace(job(2, "a", 1, "v100", reason="Priority"), begin_time=int(T + 100)),
            replace(job(3, "a", 1, "v100", reason="Priority"), begin_time=int(T + 400), blocked=BEGIN_TIME),
            job(4, "a", 1, "v100", reason="JobHeldUser")]
    s = binding.settle(_snap(jobs, [Account("a", 1, {"v100": 4})]), T + 300, {"a": {"v100": 4}})
    assert {j.job_id: P.blocked_kind(j) for j in s.jobs} == {1: "", 2: "", 3: BEGIN_TIME, 4: "held"}


def test_early_triggers_settle_begin_times_as_the_round_does(tmp_path):
    """Between rounds (the daemon's poll, the simulator's engine) the early-round triggers see demand as the round
    will: a requeued job whose begin time is due within a period makes its account a newcomer, one moved a year
    ahead does not. (Before, the round settled begin times but the poll did not: the simulator's between-round
    type map and triggers dropped every job slurm-fair had just requeued, and 18 of 250 benchmark runs changed.)"""
    cfg = _cfg(tmp_path)
    snap = _Site(_running_b_c() + _requeued(T + 121)).snapshot()
    assert P.early_triggers(snap, {"acct_b": 4, "acct_c": 2}, cfg).newcomers == {"acct_a"}
    later = _Site(_running_b_c() + _requeued(T + YEAR)).snapshot()
    assert P.early_triggers(later, {"acct_b": 4, "acct_c": 2}, cfg).newcomers == frozenset()
