"""Issue 40, item 1: drift-safe for every key and every account, through the round code (``run_round`` on a
cluster double whose GPU limits an admin edits between rounds, then ``rollback``).

* (A) a key slurm-fair never wrote, added by hand to an account it manages (``k80=1``), is the site's: kept as
  it is round after round — a round where nobody waits included, and one whose plan would lower it — never
  cleared, and left (named "kept") by rollback. Before: the next round cleared it (``limit_changes`` clears
  every key the plan leaves out; ``drift`` looked only at keys slurm-fair wrote).
* (B) an account left alone in round N (a new account with its own ``v100=3``) stays left alone in round N+1 and
  after: its site limits are recorded by the round that first plans it. Before: every planned account was
  recorded as managed but only changed ones had their site limits recorded, so round N+1 took it for a managed
  account without site limits and wrote the lending limits over ``v100=3``.
* A round facing limits no record explains (a new database) writes none and manages none, in its second round
  too (before: the first recorded every account as managed, so the second wrote over them).
"""

from __future__ import annotations

from typing import Mapping

from slurm_fair import config
from slurm_fair.cluster.base import ANY_GPU, CLEAR
from slurm_fair.daemon import rollback
from slurm_fair.daemon.round import run_round
from slurm_fair.store import Store
from tests.conftest import job, snap

ACCOUNTS = {"acct_a": 1, "acct_b": 1, "acct_c": 2}


class _Site:
    """A cluster double: a fixed set of jobs (``jobs``, changed by the test between rounds) on a v100 node and a
    k80 node (4 GPUs each), and the accounts' GPU limits as sacctmgr would hold them."""

    def __init__(self, jobs=(), limits: Mapping[str, Mapping[str, int]] | None = None, accounts=None):
        self.jobs = list(jobs)
        self.accounts = dict(accounts or ACCOUNTS)
        self.limits = {a: dict((limits or {}).get(a, {})) for a in self.accounts}
        self.writes: list[dict[str, dict[str, int]]] = []

    def snapshot(self):
        return snap(self.jobs, accounts=self.accounts, limits={a: dict(v) for a, v in self.limits.items()})

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
        return None  # unknown: priority.site_factor_max "auto" takes its fallback

    def set_job_gpu_type(self, job_id, gpu_type, gpus_per_node):
        pass


def _cfg(tmp_path):
    return config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite"), "dry_run": False,
                                        "status_file": ""},
                             "submit": {"type_map": ""}, "policy": {"name": "equal-share"}})


def _round(site: _Site, cfg):
    with Store(cfg.database_path) as st:
        res = run_round(site, st, cfg)
    assert res.status == "ok", res.message
    return res


def _b_runs_4_v100(waiting_v100: int = 0, waiting_k80: int = 0):
    """acct_b runs a job on each V100; acct_a waits for ``waiting_v100`` V100s and ``waiting_k80`` K80s."""
    jobs = [job(i, "acct_b", gpu_type="v100", state="RUNNING", alloc={"v100": 1}) for i in range(1, 5)]
    jobs += [job(10 + i, "acct_a", gpu_type="v100", reason="Resources") for i in range(waiting_v100)]
    jobs += [job(20 + i, "acct_a", gpu_type="k80", reason="Resources") for i in range(waiting_k80)]
    return jobs


def test_a_key_added_by_hand_to_a_managed_account_is_kept_in_every_round_and_by_rollback(tmp_path):
    cfg = _cfg(tmp_path)
    site = _Site(_b_runs_4_v100(waiting_v100=3))
    _round(site, cfg)
    # equal shares of the 4 V100s: acct_a's 3 waiting jobs claim its 2 (acct_b borrows them now); every other
    # account may start on the 2 V100s no claim holds, and on 8 − 2 = 6 GPUs in all; the K80s: no limit
    assert site.limits == {"acct_a": {}, "acct_b": {"v100": 2, ANY_GPU: 6}, "acct_c": {"v100": 2, ANY_GPU: 6}}

    site.limits["acct_b"]["k80"] = 1  # the admin: sacctmgr modify account acct_b set GrpTRES=gres/gpu:k80=1
    res = _round(site, cfg)
    assert site.limits["acct_b"] == {"v100": 2, ANY_GPU: 6, "k80": 1} and res.limit_changes == {}
    assert res.details.drift == {"acct_b": {"k80": 1}}  # shown as set by hand (status: hand_set)

    site.jobs = _b_runs_4_v100(waiting_v100=0)  # nobody waits: every limit slurm-fair wrote is cleared ...
    res = _round(site, cfg)
    assert res.limit_changes == {"acct_b": {"v100": CLEAR, ANY_GPU: CLEAR}, "acct_c": {"v100": CLEAR, ANY_GPU: CLEAR}}
    assert site.limits == {"acct_a": {}, "acct_b": {"k80": 1}, "acct_c": {}}  # ... the site's k80=1 is not

    # acct_a waits for 4 K80s too: its guarantee of K80s is all 4 (acct_b runs on V100s, acct_c has no jobs), so
    # the plan holds everyone else to 4 − 4 = 0 K80s and to 8 − 2 − 4 = 2 GPUs in all; acct_b's hand value is
    # neither raised nor lowered (what binds acct_b is its total: it runs 4 jobs, gres/gpu=2)
    site.jobs = _b_runs_4_v100(waiting_v100=3, waiting_k80=4)
    res = _round(site, cfg)
    assert res.plan.limits["acct_b"] == {"k80": 0, "v100": 2, ANY_GPU: 2}
    assert site.limits == {"acct_a": {}, "acct_b": {"k80": 1, "v100": 2, ANY_GPU: 2},
                           "acct_c": {"k80": 0, "v100": 2, ANY_GPU: 2}}
    assert all("k80" not in ch for w in site.writes for a, ch in w.items() if a == "acct_b")  # never written

    with Store(cfg.database_path) as st:
        out = rollback.run(site, st, cfg)
    assert out["kept"] == {"acct_b": {"k80": 1}} and not out["failed"]
    assert site.limits == {"acct_a": {}, "acct_b": {"k80": 1}, "acct_c": {}}  # slurm-fair's cleared, the site's left


def test_an_account_left_alone_stays_left_alone_until_rollback(tmp_path):
    cfg = _cfg(tmp_path)
    site = _Site(_b_runs_4_v100(waiting_v100=3))
    _round(site, cfg)  # slurm-fair manages acct_a..c (as in the test above)
    # a new account arrives with a limit of its own (the admin created it with GrpTRES=gres/gpu:v100=3)
    site.accounts["acct_d"] = 1
    site.limits["acct_d"] = {"v100": 3}
    first = _round(site, cfg)
    assert first.details.left_alone == ["acct_d"] and site.limits["acct_d"] == {"v100": 3}
    for jobs in (_b_runs_4_v100(waiting_v100=3), _b_runs_4_v100(waiting_v100=0), _b_runs_4_v100(waiting_v100=3)):
        site.jobs = jobs  # acct_a waits, nobody waits, acct_a waits again
        res = _round(site, cfg)
        # without the record, acct_d would be planned like acct_c: v100=2, gres/gpu=6 (and nothing while nobody waits)
        assert res.details.left_alone == ["acct_d"] and site.limits["acct_d"] == {"v100": 3}, site.limits
        assert "acct_d" not in res.limit_changes
    assert site.limits["acct_c"] == {"v100": 2, ANY_GPU: 6}  # the others are managed as before
    with Store(cfg.database_path) as st:
        assert st.site_limits()["acct_d"] == {"v100": 3}  # recorded by the round that first left it alone

    with Store(cfg.database_path) as st:
        out = rollback.run(site, st, cfg)
    assert not out["failed"] and "acct_d" not in out["limits"]
    assert site.limits == {"acct_a": {}, "acct_b": {}, "acct_c": {}, "acct_d": {"v100": 3}}


def test_a_left_alone_accounts_limit_changed_by_hand_is_kept_and_removed_stays_removed(tmp_path):
    cfg = _cfg(tmp_path)
    site = _Site(_b_runs_4_v100(waiting_v100=3), limits={"acct_c": {"v100": 3}})
    with Store(cfg.database_path) as st:
        st.record_site_limits({"acct_c": {"v100": 3}})  # `slurm-fair limits adopt`
    _round(site, cfg)
    site.limits["acct_c"] = {"v100": 4, "k80": 1}  # the admin raises its V100s and adds K80s
    res = _round(site, cfg)
    assert res.details.left_alone == ["acct_c"] and site.limits["acct_c"] == {"v100": 4, "k80": 1}
    assert "acct_c" not in res.limit_changes  # before: the recorded v100=3 was written back, k80 cleared
    site.limits["acct_c"] = {}  # ... and removes them
    _round(site, cfg)
    assert site.limits["acct_c"] == {}  # before: v100=3 was written back


def test_a_new_database_facing_limits_writes_none_in_its_second_round_either(tmp_path):
    cfg = _cfg(tmp_path)
    site = _Site(_b_runs_4_v100(waiting_v100=3), limits={"acct_b": {"v100": 4, ANY_GPU: 4}})
    for _ in range(2):
        res = _round(site, cfg)
        assert res.details.unrecorded == {"acct_b": {"v100": 4, ANY_GPU: 4}} and site.writes == []
    with Store(cfg.database_path) as st:
        assert st.managed() == set() and st.site_limits() == {}  # nothing taken for the site's or managed
