"""Reports earn trust and classes are bounded, on the real testbed (issue 21 items 3 and 5, issue 30 item 3): a job
naming a class another account has values for reports into its own account's values, apart (before: refused,
which let any account block another's profiling by naming its class first); ``fair:profile`` on a job of a user not in
``[profiling] trusted_users`` counts as a job report (harvested); an account's classes beyond
``max_classes_per_account`` count as ``default`` with a ``class-folded`` event. Fixtures: test_profiling.py's."""

from __future__ import annotations

from . import test_profiling as P
from .test_profiling import reporting_job, wait_comment

sf, pylib = P.sf, P.pylib  # the fixtures, shared

REPORT = "import slurm_fair; slurm_fair.report(throughput=10)"


def test_a_class_name_is_per_account_and_untrusted_profile_tokens_are_job_reports(testbed, sf, pylib):
    sf.path.write_text(sf.path.read_text() + '[profiling]\ntrusted_users = ["nobody-runs-profiling"]\n')
    ja = reporting_job(testbed, pylib, "acct_a", "v100", "owned", REPORT)
    wait_comment(testbed, ja, "fair:tput=10@1")
    sf.cli("daemon", "--once")
    assert sf.values("acct_a", "owned")[("v100", "harvested")].throughput == 10.0
    jb = reporting_job(testbed, pylib, "acct_b", "v100", "owned", REPORT)
    jp = reporting_job(testbed, pylib, "acct_b", "k80", "mine fair:profile", REPORT)  # comment: class=mine fair:profile
    wait_comment(testbed, jb, "fair:tput=10@1")
    wait_comment(testbed, jp, "fair:tput=10@1")
    sf.cli("daemon", "--once")
    assert set(sf.values("acct_b", "owned")) == {("v100", "harvested")}  # acct_b's own, apart
    assert sf.values("acct_a", "owned")[("v100", "harvested")].samples == 1  # acct_a's untouched
    assert not [e for e in sf.db.events(kind="profile-report-refused") if e.job_id == jb]
    assert set(sf.values("acct_b", "mine")) == {("k80", "harvested")}
    (r,) = [r for r in sf.db.profile_reports(account="acct_b") if r.job_id == jp]
    assert r.status == "accepted" and "trusted_users" in r.message
    for j in (ja, jb, jp):
        testbed.run(["scancel", str(j)])


def test_classes_beyond_the_cap_count_as_default_with_an_event(testbed, sf):
    sf.path.write_text(sf.path.read_text() + "[profiling]\nmax_classes_per_account = 1\n")
    # ranked by their oldest job's submit time, then by name: "early" is kept, "late" counts as default
    jobs = [testbed.sbatch("acct_c", gpus=1, comment=f"class={c}", command="sleep 60") for c in ("early", "late")]
    testbed.wait_for(lambda: all(testbed.job(j).get("JobState") == "RUNNING" for j in jobs), 60, what="jobs running")
    sf.cli("daemon", "--once")
    details = sf.db.rounds(limit=1)[0].details
    assert details["classes_folded"] == {"acct_c": ["late"]}
    assert set(details["classes"]["acct_c"]) == {"early", "default"}
    (e,) = [e for e in sf.db.events(kind="class-folded") if e.account == "acct_c"]
    assert "'late'" in e.message and "max_classes_per_account" in e.message
    for j in jobs:
        testbed.run(["scancel", str(j)])
