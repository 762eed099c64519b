"""The simulated cluster's controller hooks (issue 39): the start and end records slurm-fair's
``PrologSlurmctld``/``EpilogSlurmctld`` hooks write for each run of a job (``slurm_fair/jobrecord.py``'s format),
written into the daemon's spool so that its round ingests them as on a real cluster (``daemon/ingest.py``). The
store's job runs then hold what the hooks would have recorded — e.g. each class's run times, which the type map
estimates the end of a job without a time limit by (``store.jobs.class_run_times``).

One record per run start (restart count = the run's index: each requeue starts a new run) and per run end (its
work done, or requeued); GPUs read as the controller hook reads them (``gpu_info`` ``scontrol AllocTRES``). Times
are the daemon's clock (trace time + the cluster's epoch)."""

from __future__ import annotations

import os
from typing import Any, Iterable

from .. import jobrecord


def run_records(job: Any, epoch: float, written: set[tuple[int, int, str]]) -> list[dict[str, Any]]:
    """The records of ``job``'s runs (a :class:`.jobs.SimJob`) not in ``written`` ((job id, run index, event));
    adds them there."""
    out = []
    for i, run in enumerate(job.runs):
        gpus = sum(int(c) for c in run.nodes.values()) or int(job.gpus)
        for event, context, at in (("start", "prolog_slurmctld", run.start), ("end", "epilog_slurmctld", run.end)):
            key = (int(job.job_id), i, event)
            if at is None or key in written:
                continue
            written.add(key)
            out.append({
                "v": jobrecord.FORMAT_VERSION, "event": event, "context": context, "job_id": int(job.job_id),
                "restart_count": i, "time": epoch + float(at), "account": job.account, "user": job.account,
                "partition": "gpu", "job_name": job.cls, "class": job.cls, "node": "",
                "nodelist": ",".join(sorted(run.nodes)), "gpus": {run.gpu_type: gpus}, "gpu_count": gpus,
                "gpu_info": "scontrol AllocTRES", "start_time": epoch + float(run.start),
                "end_time": None if event == "start" else epoch + float(at), "submit_time": epoch + float(job.submit),
                "requeued": event == "end" and run.how == "requeue",
            })
    return out


def write_new_records(jobs: Iterable[Any], epoch: float, spool: str, written: set[tuple[int, int, str]]) -> int:
    """Write the records of runs started or ended since the last call into ``spool`` (named as the hooks name
    them; a hidden temp file renamed, as they write, without their fsync: a scratch folder); returns how many."""
    os.makedirs(spool, exist_ok=True)
    n = 0
    for j in jobs:
        for rec in run_records(j, epoch, written):
            final = os.path.join(spool, jobrecord.record_name(rec))
            tmp = os.path.join(spool, "." + jobrecord.record_name(rec) + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(jobrecord.to_json(rec) + "\n")
            os.replace(tmp, final)
            n += 1
    return n
