"""Benchmark: daemon rounds at a site's size on the real testbed (issue 20, item 7).

    eval "$(contrib/testbed/testbed.sh env)"; export SLURM_CONF SLURM_FAIR_CONFIG SLURM_FAIR_TESTBED
    python benchmarks/site_round.py [--accounts 300] [--jobs 5000] [--types a100,v100,k80] [--rounds 2]
                                    [--depts 10] [--groups 3] [--array-size 1] [--json OUT.json] [--keep]

Needs a running testbed (root: jobs are submitted with ``sbatch --uid``). Steps, each measured:

1. **Hooks**: on the still idle cluster, a few short GPU jobs run to completion with the testbed's hooks
   installed (PrologSlurmctld/EpilogSlurmctld/Prolog/Epilog = slurm-fair's shim); ``sdiag`` before/after gives
   the controller RPCs per job by message type, and one ``scontrol show job -d`` (what each controller hook
   runs) alone gives the RPCs the hooks add.
2. **Setup**: a three-level account tree (``--depts`` departments × ``--groups`` groups, the ``--accounts``
   leaves spread over the groups; Fair Tree shares on every level), one user association per leaf (the
   testbed's users alice/bob/carol in turn), created in batches (one ``sacctmgr add account`` per parent, one
   ``modify`` per share value, one ``add user`` per user); then ``--jobs`` GPU jobs (``sleep --job-seconds``)
   spread over the leaves (every leaf at least one, the rest Zipf-skewed), over the ``--types`` and untyped
   requests (``--untyped``), 1/2/4 GPUs. By default every job is its own record (``--array-size 1``): that is
   what the daemon reads, ranks and sets a SiteFactor on one by one, the heavy case. A site whose users submit
   arrays shows the daemon one record per array until Slurm splits it (``--array-size N`` submits arrays of up
   to N tasks; the tables count both records and tasks). Nothing is held: the testbed's 16 GPUs run 16 jobs
   and the rest wait for resources, as on a busy site, so SiteFactors apply to them.
3. **Idle window**: ``sdiag`` and the CPU time of slurmctld/slurmdbd/mariadbd over ``--idle`` seconds with no
   client: the controller's own background work with this many pending jobs.
4. **Submission cost**: ``--probe`` sequential held submissions before the first round (no GPU type map) and
   after the last (the map of every account, re-read by job_submit.lua on each submission).
5. **Rounds**: ``--rounds`` daemon rounds (``run_round`` with the CLI backend, as ``slurm-fair daemon`` runs
   them: one process, a fresh database, the testbed's config with ``dry_run = false``) in a child process
   (``site_probe.py``), the first cold, the next warm. Per round: wall time per phase, Slurm commands by kind
   (count, seconds), limit changes, SiteFactor updates made and deferred (``MAX_SITE_FACTOR_UPDATES``), the
   SiteFactor bands (distinct values vs accounts), the controller's RPCs and the daemons' CPU seconds over
   the round, the child's peak RSS.
6. **Cleanup** (unless ``--keep``): jobs cancelled, accounts deleted, the testbed's own accounts' limits put
   back with ``slurm-fair rollback``'s code, the type map restored as it was.

Prints markdown tables; ``--json`` writes everything measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import site_probe as S  # noqa: E402
from benchmarks import site_report as report  # noqa: E402
from benchmarks.observe import config as slurm_config  # noqa: E402

PREFIX = "sfb"  # every account this benchmark creates: sfb<NNNN> leaves, sfbd<NN> departments, sfbd<NN>g<N> groups
OURS = re.compile(r"^sfb(\d{4}|d\d{2}(g\d+)?)$")
USERS = ("alice", "bob", "carol")
CLASSES = ("resnet18-bs64", "lm-bs20", "transformer-bs32", "a3c", "cyclegan", "recommendation-bs1024")
GPUS = ((1, 0.7), (2, 0.2), (4, 0.1))  # GPUs per job and their share


def run(argv: list[str], timeout: float = 300, check: bool = True, cwd: str | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])}... exited {r.returncode}: {r.stderr.strip()[:400]}")
    return r.stdout


# ------------------------------------------------------------------------------------------------ setup
def make_tree(n: int, depts: int, groups: int) -> dict[str, Any]:
    """{"depts": [...], "groups": {dept: [group...]}, "leaves": {group: [leaf...]}, "share": {name: shares}}"""
    depts = max(1, min(depts, n))
    groups = max(1, min(groups, -(-n // depts)))
    dnames = [f"{PREFIX}d{d:02d}" for d in range(depts)]
    gnames = {d: [f"{d}g{g}" for g in range(groups)] for d in dnames}
    flat = [g for d in dnames for g in gnames[d]]
    leaves: dict[str, list[str]] = {g: [] for g in flat}
    for i in range(n):
        leaves[flat[i % len(flat)]].append(f"{PREFIX}{i:04d}")
    share = {d: 1 + i % 3 for i, d in enumerate(dnames)}
    share.update({g: 1 + i % 2 for i, g in enumerate(flat)})
    share.update({a: (1, 2, 4)[i % 3] for i, a in enumerate(a for g in flat for a in leaves[g])})
    return {"depts": dnames, "groups": gnames, "leaves": {g: v for g, v in leaves.items() if v}, "share": share}


def setup_accounts(tree: dict[str, Any], cluster: str) -> dict[str, Any]:
    t = time.monotonic()
    calls = 0

    def sacctmgr(*args: str) -> None:
        nonlocal calls
        calls += 1
        run(["sacctmgr", "-i", *args])

    def chunks(names: list[str], n: int = 100) -> list[str]:
        return [",".join(names[i:i + n]) for i in range(0, len(names), n)]

    for c in chunks(tree["depts"]):
        sacctmgr("add", "account", c, f"cluster={cluster}")
    for d, gs in tree["groups"].items():
        gs = [g for g in gs if g in tree["leaves"]]
        for c in chunks(gs):
            sacctmgr("add", "account", c, f"parent={d}", f"cluster={cluster}")
    for g, ls in tree["leaves"].items():
        for c in chunks(ls):
            sacctmgr("add", "account", c, f"parent={g}", f"cluster={cluster}")
    created = set(tree["depts"]) | set(tree["leaves"]) | set(leaf_user(tree))
    by_share: dict[int, list[str]] = {}
    for name, s in tree["share"].items():
        if s != 1 and name in created:
            by_share.setdefault(s, []).append(name)
    for s, names in sorted(by_share.items()):
        for c in chunks(sorted(names)):
            sacctmgr("modify", "account", "where", f"name={c}", f"cluster={cluster}", "set", f"fairshare={s}")
    users: dict[str, list[str]] = {}
    for a, u in leaf_user(tree).items():
        users.setdefault(u, []).append(a)
    for u, accts in users.items():
        for c in chunks(accts):
            sacctmgr("add", "user", u, f"account={c}", f"cluster={cluster}")
    n_groups = len(tree["leaves"])
    return {"depts": len(tree["depts"]), "groups": n_groups, "leaves": len(leaf_user(tree)),
            "user_associations": len(leaf_user(tree)), "sacctmgr_calls": calls, "seconds": time.monotonic() - t}


def leaf_user(tree: dict[str, Any]) -> dict[str, str]:
    leaves = [a for g in tree["leaves"] for a in tree["leaves"][g]]
    return {a: USERS[i % len(USERS)] for i, a in enumerate(leaves)}


def plan_jobs(tree: dict[str, Any], n_jobs: int, types: list[str], untyped: float, skew: float,
              array_size: int, seed: int) -> list[dict[str, Any]]:
    """Submissions: {"account", "user", "gres", "name", "tasks"}; every leaf gets at least one job."""
    rng = random.Random(seed)
    users = leaf_user(tree)
    leaves = list(users)
    order = leaves[:]
    rng.shuffle(order)
    weights = [1.0 / (r + 1) ** skew for r in range(len(order))]
    count = {a: 1 for a in leaves}
    for a in rng.choices(order, weights=weights, k=max(n_jobs - len(leaves), 0)):
        count[a] += 1
    subs = []
    for i, a in enumerate(leaves):
        reqs: dict[tuple[str, str], int] = {}
        classes = [CLASSES[i % len(CLASSES)], CLASSES[(i + 1 + i // len(CLASSES)) % len(CLASSES)]]
        for _ in range(count[a]):
            t = None if rng.random() < untyped else rng.choice(types)
            n = rng.choices([g for g, _ in GPUS], weights=[w for _, w in GPUS])[0]
            key = (f"gpu:{t}:{n}" if t else f"gpu:{n}", rng.choice(classes))
            reqs[key] = reqs.get(key, 0) + 1
        for (gres, name), k in sorted(reqs.items()):
            while k > 0:
                tasks = min(k, array_size)
                subs.append({"account": a, "user": users[a], "gres": gres, "name": name, "tasks": tasks})
                k -= tasks
    rng.shuffle(subs)  # submission order mixes accounts, as on a site
    return subs


def sbatch_argv(sub: dict[str, Any], job_seconds: int, hold: bool = False) -> list[str]:
    argv = ["sbatch", "--parsable", "--uid", sub["user"], "-A", sub["account"], "-J", sub["name"],
            f"--gres={sub['gres']}", "--output=/dev/null", "--time=1-0"]
    if sub["tasks"] > 1:
        argv.append(f"--array=0-{sub['tasks'] - 1}")
    if hold:
        argv.append("--hold")
    return [*argv, "--wrap", f"sleep {int(job_seconds)}"]


def submit(subs: list[dict[str, Any]], workdir: str, job_seconds: int, threads: int) -> dict[str, Any]:
    t = time.monotonic()
    fails: list[str] = []

    def one(sub: dict[str, Any]) -> None:
        r = subprocess.run(sbatch_argv(sub, job_seconds), capture_output=True, text=True, timeout=300, cwd=workdir)
        if r.returncode != 0:
            fails.append(r.stderr.strip()[:200])

    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, subs))
    if fails:
        raise SystemExit(f"{len(fails)} of {len(subs)} submissions failed, first: {fails[0]}")
    return {"records": len(subs), "tasks": sum(s["tasks"] for s in subs), "seconds": time.monotonic() - t,
            "threads": threads}


# ------------------------------------------------------------------------------------------------ hooks, probes
def wait_ended(ids: list[str], timeout: float = 180) -> None:
    """Until every job is over, asked of slurmdbd (sacct sends no RPC to slurmctld)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = run(["sacct", "-n", "-X", "-P", "-j", ",".join(ids), "-o", "jobid,state"], check=False)
        states = dict(ln.split("|", 1) for ln in out.splitlines() if "|" in ln)
        if len(states) >= len(ids) and all(s.split()[0] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED")
                                           for s in states.values()):
            return
        time.sleep(1)
    raise SystemExit(f"jobs {ids} did not end within {timeout:g} s")


def measure_hooks(pids: dict[str, int], workdir: str, n: int, idle: float) -> dict[str, Any]:
    """RPCs per job with the hooks installed, net of an idle window of the same length; and the RPCs of one
    ``scontrol show job -d`` (what each controller hook runs)."""
    p0 = S.probe(pids)
    time.sleep(idle)
    p1 = S.probe(pids)
    bg = S.window(p0, p1)
    ids = []
    for i in range(n):
        out = run(["sbatch", "--parsable", "--uid", "alice", "-A", "acct_a", "-J", CLASSES[i % len(CLASSES)],
                   "--gres=gpu:1", "--output=/dev/null", "--wrap", "sleep 1"], cwd=workdir)
        ids.append(out.strip().split(";")[0])
    wait_ended(ids)
    time.sleep(3)  # the last epilogs report back
    p2 = S.probe(pids)
    jobs = S.window(p1, p2)
    run(["scontrol", "show", "job", "-d", ids[0]])
    p3 = S.probe(pids)
    one = S.window(p2, p3)
    spool = os.path.join(os.environ["SLURM_FAIR_TESTBED"], "hooks-spool")
    records = sum(1 for f in os.listdir(spool) if f.split(".", 1)[0] in ids) if os.path.isdir(spool) else None
    return {"jobs": n, "job_ids": ids, "idle": bg, "window": jobs, "scontrol_show_job": one,
            "hook_records": records}


def probe_submissions(pids: dict[str, int], account: str, user: str, workdir: str, n: int) -> dict[str, Any]:
    """``n`` sequential held untyped submissions (job_submit.lua types them from the map): sbatch wall time and
    the controller's REQUEST_SUBMIT_BATCH_JOB time. The jobs are cancelled after the measurement."""
    sub = {"account": account, "user": user, "gres": "gpu:1", "name": CLASSES[0], "tasks": 1}
    p0 = S.probe(pids)
    ids, walls = [], []
    for _ in range(n):
        t = time.perf_counter()
        ids.append(run(sbatch_argv(sub, 60, hold=True), cwd=workdir).strip().split(";")[0])
        walls.append(time.perf_counter() - t)
    p1 = S.probe(pids)
    run(["scancel", *ids], check=False)
    w = S.window(p0, p1)
    c, us = w["sdiag"]["types"].get("REQUEST_SUBMIT_BATCH_JOB", [0, 0])
    walls.sort()
    return {"n": n, "sbatch_median_s": walls[len(walls) // 2], "sbatch_max_s": walls[-1],
            "submit_rpc_ave_us": us / c if c else None, "window": w}


# ------------------------------------------------------------------------------------------------ rounds
def bench_config(tmp: Path, args: argparse.Namespace) -> Path:
    """The testbed's slurm-fair config with a fresh database, dry_run off, the benchmark's period/policy."""
    src = Path(os.environ["SLURM_FAIR_CONFIG"])
    doc = tomllib.loads(src.read_text())
    base = src.resolve().parent
    for sec, key in (("daemon", "database"), ("hooks", "spool"), ("submit", "type_map")):
        v = doc.get(sec, {}).get(key)
        if v and not os.path.isabs(v):
            doc[sec][key] = str(base / v)
    doc.setdefault("daemon", {}).update({"database": str(tmp / "bench.sqlite"), "dry_run": False,
                                         "period": args.period})
    if args.policy:
        doc.setdefault("policy", {})["name"] = args.policy
    doc.setdefault("cluster", {}).update({"backend": "cli", "timeout": 300})
    path = tmp / "config.json"
    path.write_text(json.dumps(doc))
    return path


def run_rounds(cfg_path: Path, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    out = tmp / "rounds.json"
    argv = [sys.executable, str(Path(S.__file__)), "--out", str(out), "--config", str(cfg_path),
            "--rounds", str(args.rounds), "--variants", args.variants, "--gap", str(args.gap),
            "--polls", str(args.polls), "--testbed", os.environ["SLURM_FAIR_TESTBED"]]
    t = time.monotonic()
    r = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    if r.returncode != 0:
        raise SystemExit(f"the rounds' child process exited {r.returncode}")
    res = json.loads(out.read_text())
    res["process_seconds"] = time.monotonic() - t
    return res


def slurm_bands(accounts: set[str]) -> dict[str, Any]:
    """SiteFactors as Slurm holds them now (sprio) for the pending jobs of ``accounts``."""
    acct = {}
    for ln in run(["squeue", "-h", "-t", "PD", "-o", "%i|%a"]).splitlines():
        jid, _, a = ln.partition("|")
        if a in accounts and jid.isdigit():
            acct[int(jid)] = a
    factors, prio = {}, {}
    for ln in run(["sprio", "-h", "-o", "%i|%S|%Y"]).splitlines():
        parts = [p.strip() for p in ln.split("|")]
        if len(parts) == 3 and parts[0].isdigit() and int(parts[0]) in acct:
            factors[int(parts[0])] = int(parts[1])
            prio[int(parts[0])] = int(parts[2])
    out = S.bands({j: v for j, v in factors.items() if v}, acct)
    out["pending_jobs"] = len(acct)
    out["with_site_factor"] = sum(1 for v in factors.values() if v)
    out["order_kept"] = order_kept(factors, prio, acct)
    return out


def order_kept(factors: dict[int, int], prio: dict[int, int], acct: dict[int, str]) -> float | None:
    """Share of account pairs ordered the same way by their jobs' mean SiteFactor and by their jobs' mean
    whole priority (SiteFactor plus Slurm's age, fair-share, QOS … factors): 1.0 = Slurm's own factors never
    reorder slurm-fair's bands."""
    sf: dict[str, list[int]] = {}
    pr: dict[str, list[int]] = {}
    for j, v in factors.items():
        if v and j in prio:
            sf.setdefault(acct[j], []).append(v)
            pr.setdefault(acct[j], []).append(prio[j])
    names = sorted(sf)
    ms = [sum(sf[a]) / len(sf[a]) for a in names]
    mp = [sum(pr[a]) / len(pr[a]) for a in names]
    same = total = 0
    for i in range(len(names)):
        for k in range(i + 1, len(names)):
            if ms[i] != ms[k]:
                total += 1
                same += (ms[i] - ms[k]) * (mp[i] - mp[k]) > 0
    return same / total if total else None


# ------------------------------------------------------------------------------------------------ cleanup
def ours() -> list[str]:
    return [a for a in run(["sacctmgr", "-n", "-P", "show", "account", "format=account"]).split() if OURS.match(a)]


def cleanup(db: Path | None, map_before: bytes | None, map_path: Path | None) -> dict[str, Any]:
    t = time.monotonic()
    accounts = set(ours())
    ids = sorted({ln.split("|")[0] for ln in run(["squeue", "-h", "-o", "%F|%a"]).splitlines()
                  if ln.split("|")[-1] in accounts})  # pending and running; an array by its job id
    for i in range(0, len(ids), 500):
        run(["scancel", *ids[i:i + 500]], check=False)
    for _ in range(120):
        active = [ln for ln in run(["squeue", "-h", "-o", "%a"]).split() if ln in accounts]
        if not active:
            break
        time.sleep(1)
    for _ in range(10):  # an account whose jobs are still completing cannot be deleted yet
        left = sorted(ours(), key=lambda a: (-len(a), a))  # leaves, then groups, then departments
        if not left:
            break
        for i in range(0, len(left), 100):
            run(["sacctmgr", "-i", "delete", "account", ",".join(left[i:i + 100])], check=False)
        time.sleep(2)
    rolled = None
    if db is not None and db.exists():
        from slurm_fair import config as config_mod
        from slurm_fair.cluster import connect
        from slurm_fair.daemon import rollback
        from slurm_fair.store import Store

        cfg = config_mod.from_dict(json.loads((db.parent / "config.json").read_text()))
        store = Store(db)
        try:
            rolled = rollback.run(connect("cli", timeout=300), store, cfg)
        finally:
            store.close()
    if map_path is not None:
        if map_before is None:
            map_path.unlink(missing_ok=True)
        else:
            map_path.write_bytes(map_before)
    return {"seconds": time.monotonic() - t, "jobs_cancelled": len(ids), "accounts_deleted": len(accounts),
            "accounts_left": len(ours()), "rollback_limits": len(rolled["limits"]) if rolled else 0}


# ------------------------------------------------------------------------------------------------ main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accounts", type=int, default=300, help="leaf accounts (default 300)")
    ap.add_argument("--depts", type=int, default=10, help="top-level accounts (default 10)")
    ap.add_argument("--groups", type=int, default=3, help="groups per department (default 3)")
    ap.add_argument("--jobs", type=int, default=5000, help="pending GPU jobs (tasks) to submit (default 5000)")
    ap.add_argument("--types", default="a100,v100,k80", help="GPU types typed requests name (default a100,v100,k80)")
    ap.add_argument("--untyped", type=float, default=0.25, help="share of untyped requests (default 0.25)")
    ap.add_argument("--skew", type=float, default=0.8, help="Zipf exponent of jobs per account (default 0.8)")
    ap.add_argument("--array-size", type=int, default=1, help="submit arrays of up to N tasks (default 1: none)")
    ap.add_argument("--job-seconds", type=int, default=3600, help="each job's sleep (default 3600)")
    ap.add_argument("--threads", type=int, default=4, help="concurrent sbatch (default 4)")
    ap.add_argument("--rounds", type=int, default=2, help="daemon rounds: the first cold, then warm (default 2)")
    ap.add_argument("--variants", default="default",
                    help="comma list of limit models run one after the other on one store: default (the config "
                         "as is), lend, nolend (limits.lend = false: every managed account gets its guarantee "
                         "as its limit) (default: default)")
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between rounds (default 5)")
    ap.add_argument("--polls", type=int, default=3, help="daemon polls (between rounds) timed after the rounds")
    ap.add_argument("--period", type=float, default=300.0, help="daemon.period of the rounds (default 300)")
    ap.add_argument("--policy", default="", help="policy (default: the testbed config's, i.e. the default)")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of the idle windows (default 20)")
    ap.add_argument("--hook-jobs", type=int, default=6, help="short jobs run for the hooks' RPCs (default 6)")
    ap.add_argument("--probe", type=int, default=10, help="held submissions timed before/after (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every measurement to this file")
    ap.add_argument("--keep", action="store_true", help="leave the jobs, accounts, limits and map in place")
    args = ap.parse_args()
    for var in ("SLURM_CONF", "SLURM_FAIR_TESTBED", "SLURM_FAIR_CONFIG"):
        if not os.environ.get(var):
            raise SystemExit(f"{var} is not set: run against a testbed only "
                             "(eval \"$(contrib/testbed/testbed.sh env)\"; export SLURM_CONF SLURM_FAIR_CONFIG "
                             "SLURM_FAIR_TESTBED)")
    if os.geteuid() != 0:
        raise SystemExit("run as root (jobs are submitted for the testbed's users with sbatch --uid)")
    if ours():
        raise SystemExit("accounts sfb* from an earlier run exist: delete them (or run the cleanup of that run)")
    types = [t for t in args.types.split(",") if t]
    conf = slurm_config()
    max_jobs, max_array = int(conf.get("MaxJobCount", "10000")), int(conf.get("MaxArraySize", "1001"))
    in_memory = len(run(["squeue", "-h", "-t", "all", "-o", "%i", "-r"]).split())
    need = args.jobs + args.hook_jobs + 2 * args.probe
    if in_memory + need > max_jobs:
        raise SystemExit(f"slurmctld holds {in_memory} job records; {need} more would pass MaxJobCount={max_jobs}"
                         f" (finished jobs stay MinJobAge={conf.get('MinJobAge')}); wait or use fewer --jobs")
    if args.array_size > max_array - 1:
        raise SystemExit(f"--array-size {args.array_size} > MaxArraySize-1 = {max_array - 1}")
    testbed = os.environ["SLURM_FAIR_TESTBED"]
    workdir = os.path.join(testbed, "jobs")
    pids = S.daemon_pids(testbed)
    result: dict[str, Any] = {
        "args": vars(args), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
        "slurm": {"version": run(["scontrol", "--version"]).strip(), "MaxJobCount": max_jobs,
                  "MaxArraySize": max_array, "MinJobAge": conf.get("MinJobAge"),
                  "SchedulerParameters": conf.get("SchedulerParameters"), "in_memory_before": in_memory},
        "load_before": os.getloadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="site-round-"))
    cfg_path = bench_config(tmp, args)
    map_path = json.loads(cfg_path.read_text()).get("submit", {}).get("type_map")
    map_path = Path(map_path) if map_path else None
    map_before = map_path.read_bytes() if map_path is not None and map_path.exists() else None
    try:
        print(f"hooks: {args.hook_jobs} short jobs ...", file=sys.stderr, flush=True)
        result["hooks"] = measure_hooks(pids, workdir, args.hook_jobs, min(args.idle, 10.0))
        tree = make_tree(args.accounts, args.depts, args.groups)
        result["setup"] = setup_accounts(tree, conf.get("ClusterName", "testbed"))
        subs = plan_jobs(tree, args.jobs, types, args.untyped, args.skew, args.array_size, args.seed)
        print(f"setup: {result['setup']['leaves']} leaves in {result['setup']['seconds']:.1f} s; submitting "
              f"{len(subs)} records ...", file=sys.stderr, flush=True)
        p0 = S.probe(pids)
        result["submit"] = submit(subs, workdir, args.job_seconds, args.threads)
        result["submit"]["window"] = S.window(p0, S.probe(pids))
        time.sleep(5)
        p0 = S.probe(pids)
        time.sleep(args.idle)
        result["idle"] = S.window(p0, S.probe(pids))
        leaf0 = next(iter(leaf_user(tree)))
        result["probe_before"] = probe_submissions(pids, leaf0, leaf_user(tree)[leaf0], workdir, args.probe)
        print(f"rounds: {args.rounds} x {args.variants} (load {os.getloadavg()[0]:.2f}) ...", file=sys.stderr, flush=True)
        result["rounds"] = run_rounds(cfg_path, tmp, args)
        result["probe_after"] = probe_submissions(pids, leaf0, leaf_user(tree)[leaf0], workdir, args.probe)
        result["bands_slurm"] = slurm_bands(set(leaf_user(tree)))
        result["load_after"] = os.getloadavg()
    finally:
        if not args.keep:
            print("cleanup ...", file=sys.stderr, flush=True)
            result["cleanup"] = cleanup(tmp / "bench.sqlite", map_before, map_path)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept: the benchmark's accounts and jobs, its database and config in {tmp}", file=sys.stderr)
    print(report.render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
