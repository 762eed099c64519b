"""status and explain (views/status.py, views/explain.py) in lending terms, on a store with one recorded round
and a hand-built snapshot: guarantees, claims, lendable GPUs, and why each pending job waits."""

from __future__ import annotations

from slurm_fair import config
from slurm_fair.cluster.base import ANY_GPU, Account, Job, Node, Snapshot
from slurm_fair.store import Store
from slurm_fair.views import explain, status


def job(jid, account, gpu_type="v100", reason="Resources", state="PENDING"):
    return Job(job_id=jid, name="cnn", account=account, user="u", partition="gpu", state=state, reason=reason,
               priority=1, submit_time=100, start_time=None if state == "PENDING" else 101, gpus_per_node=1, nodes=1,
               gpu_type=gpu_type, gpus_allocated={gpu_type: 1} if state == "RUNNING" else {}, site_factor=7)


def test_explain_and_status_speak_of_guarantees_claims_and_lending(tmp_path):
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite")}})
    details = {"accounts": ["a", "b"], "tenants": {"a": "a", "b": "b"}, "weights": {"a": 1.0, "b": 1.0},
               "ideal": {"a": {"v100": 2.4}, "b": {"v100": 1.6}}, "real": {"a": {"v100": 2}, "b": {"v100": 2}},
               "claims": {"a": {"v100": 1}, "b": {"v100": 0}}, "lendable": {"v100": 3}, "lend": True,
               "limits": {"a": {}, "b": {"v100": 3, ANY_GPU: 3}}, "deviations": {"a": {"v100": 0.4}}}
    with Store(cfg.database_path) as st:
        rid = st.begin_round("oef-coop", "")
        st.finish_round(rid, "ok", details=details)
        # b's limits are slurm-fair's (it wrote them): its AssocGrpGRES job is demand (issue 41, plan/binding.py)
        st.record_applied(rid, [{"account": "b", "key": "v100", "new": 3}, {"account": "b", "key": ANY_GPU, "new": 3}])
        snap = Snapshot("22.05.8", 1000.0, (Node("v", ("MIXED",), ("gpu",), {"v100": 4}, {"v100": 3}),),
                        (job(1, "b", state="RUNNING"), job(2, "b", state="RUNNING"), job(3, "b", state="RUNNING"),
                         job(4, "b", reason="AssocGrpGRES"), job(5, "b", reason="JobHeldUser"),
                         job(6, "a", reason="Resources")),
                        (Account("a", 1, {}), Account("b", 1, {"v100": 3, ANY_GPU: 3})), ("gpu",))
        ex_b = explain.explain(st, cfg, "b", snap)
        ex_a = explain.explain(st, cfg, "a", snap)
        stat = status.status(st, cfg, snap)
    assert ex_b["real"] == {"v100": 2} and ex_b["claims"] == {"v100": 0} and ex_b["lendable"] == {"v100": 3}
    why = {j["job_id"]: j["slurm_fair"] for j in ex_b["pending_jobs"] + ex_a["pending_jobs"]}
    assert why[4].startswith("held back by its limit (holds 3 GPUs; limit 3; v100=3): other accounts' waiting "
                             "jobs claim the GPUs of their guarantees; this account's guarantee is v100=2")
    assert why[5].startswith("Slurm holds it back (JobHeldUser): not counted as demand: it is held")
    held = next(j for j in ex_b["pending_jobs"] if j["job_id"] == 5)
    assert (held["counted"], held["blocked"]) == (False, "held")
    assert ex_b["not_demand_now"] == {"held": 1} and ex_a["not_demand_now"] == {}
    assert stat["accounts"]["b"]["pending_gpus"] == 1  # status's PENDING: its demand, not the held job
    assert why[6].startswith("no limit holds it back; it waits for free GPUs (Resources); SiteFactor 7")
    assert stat["accounts"]["a"]["claims"] == {"v100": 1} and stat["accounts"]["b"]["real"] == {"v100": 2}
