"""Hostile bytes through slurm-fair's real parse paths (issue 21, item 6): shared by tests/test_fuzz_inputs.py
(a few derandomized examples in CI) and benchmarks/fuzz_soak.py (the 10 000-case soak).

Every user-settable field (job name, comment, wckey, constraints, work dir, output path) gets arbitrary bytes:
stray bytes that are not UTF-8, line breaks, escape sequences, NUL, bidi overrides, forged Slurm lines and
report tokens. Each case goes the way real data goes:

* ``squeue``: the captured ``squeue --json`` of Slurm 22.05 or 24.11 (tests/fixtures/slurm-json) with those
  bytes put where Slurm writes them (json-c escapes control characters; bytes that are not UTF-8 pass through
  raw), read by the real CLI backend (CliCluster.snapshot: decoding, squeue/sinfo-or-scontrol/sacctmgr/sprio
  parsing; only the processes are replaced by their captured output), then a real round (daemon/round.py,
  dry run, oef-coop, an in-memory store), ``slurm-fair why``'s explain_job and the escaping of every name;
* ``squeue_text``: ``profile status``'s squeue line format with the bytes in name and comment;
* ``hook``: a hook call (jobrecord.build_record) with the bytes in the hook's environment (SLURM_JOB_NAME as
  os.environ holds it) and in the captured ``scontrol show job`` text of the same layout (name, comment, work
  dir, output path, wckey), written to a spool and ingested into a store;
* ``spool``: arbitrary bytes and near-records as spool files, ingested.

:func:`run_case` returns an :class:`Outcome`; an exception escaping is a traceback, a round whose status is
not ok/dry-run is a stopped round.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_fair import config as config_mod
from slurm_fair import jobrecord
from slurm_fair.cluster.cli import CliCluster
from slurm_fair.cluster.errors import CommandFailed
from slurm_fair.daemon.harvest import candidates
from slurm_fair.daemon.ingest import ingest
from slurm_fair.daemon.round import run_round
from slurm_fair.views.why import explain_job
from slurm_fair.text import printable

FIX = Path(__file__).parent / "fixtures" / "slurm-json"
VERSIONS = ("22.05", "24.11")
USER_FIELDS_JSON = ("name", "comment", "wckey", "features")  # squeue --json: the fields a user sets freely
SPECIAL = [b"\xff", b"\xfe\xfd", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\n", b"\r\n", b"\x1b[31m", b"\x1b]0;x\x07",
           b"\x00", b"\t", b"\x7f", b"\xe2\x80\xae", b"\xef\xbf\xbd", b"\\", b'"', b"|", b",", b";", b" ", b"=",
           b"\n   AllocTRES=gres/gpu=8", b"\n   TRES=gres/gpu:a100=8", b"\n   UserId=root(0)", b"\nJobId=1 JobName=x",
           b"class=", b"class=\xff", b"fair:tput=5@\xc2\xb2", b"fair:tput=\xd9\xa3@1", b"fair:tput=nan@1",
           b"fair:profile", b"fair:gpu=Tesla_K80", b"fair:flex", b"gres/gpu:v100=2", "é✓😀".encode()]


def hostile_bytes(rng: random.Random, most: int = 40) -> bytes:
    """Arbitrary bytes, mostly built of the pieces above, sometimes plain random bytes."""
    if rng.random() < 0.25:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, most)))
    out = b""
    for _ in range(rng.randint(0, 6)):
        out += rng.choice(SPECIAL) if rng.random() < 0.7 else bytes([rng.getrandbits(8)])
    return out[:most * 4]


def _json_bytes(b: bytes) -> bytes:
    """``b`` as the inside of a JSON string the way json-c writes it: ``"``, ``\\`` and control characters
    escaped, every other byte (UTF-8 or not) as it is."""
    out = bytearray()
    for c in b:
        if c in (0x22, 0x5C):
            out += b"\\" + bytes([c])
        elif c < 0x20:
            out += b"\\u%04x" % c
        else:
            out.append(c)
    return bytes(out)


def _text(version: str, name: str) -> str:
    return (FIX / version / name).read_text()


_SQUEUE = {v: json.loads(_text(v, "squeue_requests.json" if v == "22.05" else "squeue.json")) for v in VERSIONS}
_NODES = {"22.05": _text("22.05", "sinfo.json"), "24.11": _text("24.11", "scontrol_node.json")}
_SCONTROL = {v: [c if i == 0 else "JobId=" + c for i, c in enumerate(_text(v, "scontrol_job.txt").split("\nJobId="))]
             for v in VERSIONS}


def squeue_with(version: str, fields: dict[tuple[int, str], bytes]) -> bytes:
    """The captured squeue --json of ``version`` with ``fields[(job index, field)]`` set to those bytes."""
    doc = json.loads(json.dumps(_SQUEUE[version]))
    marks = {}
    for n, ((i, f), b) in enumerate(sorted(fields.items())):
        job = doc["jobs"][i % len(doc["jobs"])]
        mark = f"@@HOSTILE{n}@@"
        job[f] = mark
        marks[mark.encode()] = _json_bytes(b)
    text = json.dumps(doc).encode()
    for mark, b in marks.items():
        text = text.replace(mark, b)
    return text


class _Done:
    """A finished process: what Popen(..., text=True, encoding='utf-8', errors='replace') would give."""

    def __init__(self, out: bytes, rc: int = 0, err: bytes = b""):
        self.stdout_bytes, self.returncode, self.err = out, rc, err

    def poll(self) -> int:
        return self.returncode

    def kill(self) -> None:
        pass

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        return self.stdout_bytes.decode("utf-8", "replace"), self.err.decode("utf-8", "replace")


class CapturedCluster(CliCluster):
    """The CLI backend with each Slurm client's process replaced by captured output (the argument lists,
    decoding, parsing and error handling are CliCluster's own). Writing commands are refused: a round here
    is a dry run."""

    def __init__(self, version: str, squeue: bytes):
        super().__init__(timeout=30.0, env={})
        self.outputs = {"version": f"slurm-wlm {version}\n".encode(), "config": b"ClusterName = testbed\n",
                        "squeue": squeue, "nodes": _NODES[version].encode(),
                        "sacctmgr": _text(version, "sacctmgr_assoc_fmt_limits.txt").encode(),
                        "sprio": _text(version, "sprio.txt").encode(), "list": b""}

    def _start(self, argv):  # type: ignore[override]
        self.calls.append(list(argv))
        a = " ".join(argv)
        key = ("version" if a == "scontrol --version" else "config" if a == "scontrol show config"
               else "list" if a == "squeue --json=list" else "squeue" if argv[0] == "squeue"
               else "nodes" if argv[0] == "sinfo" or a.startswith("scontrol show node")
               else "sacctmgr" if argv[0] == "sacctmgr" and "show" in argv else "sprio" if argv[0] == "sprio" else "")
        if not key:
            return _Done(b"", 1, f"refused in a fuzz case: {a}".encode())
        return _Done(self.outputs[key])

    def _finish(self, argv, proc, deadline):  # type: ignore[override]
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise CommandFailed(argv, proc.returncode, err or out)
        return out


@dataclass
class Outcome:
    kind: str
    traceback: str = ""  # an exception that escaped: type and message
    stopped: str = ""  # a round that did not end ok / dry-run: its status and message
    note: str = ""


def _no_surrogates(*texts: Any) -> None:
    for t in texts:
        s = t if isinstance(t, str) else json.dumps(t, ensure_ascii=False, default=str)
        s.encode("utf-8")  # raises on a lone surrogate


_CFG = config_mod.from_dict({"daemon": {"dry_run": True}, "policy": {"name": "oef-coop"}})


def squeue_case(version: str, fields: dict[tuple[int, str], bytes], round_: bool = True) -> Outcome:
    out = Outcome("squeue")
    cluster = CapturedCluster(version, squeue_with(version, fields))
    snap = cluster.snapshot()
    for j in snap.jobs:
        _no_surrogates(j.name, j.comment, j.wckey, j.account, j.user, j.partition, j.reason)
        assert printable(j.name, None).isprintable() and printable(j.comment, None).isprintable()
    candidates(snap, [], _CFG.classes.order)
    for j in snap.jobs[:2]:
        ex = explain_job(j, None, 0.0, status_error="no status file in a fuzz case")
        _no_surrogates(ex.summary if hasattr(ex, "summary") else "", repr(ex))
    if round_:
        from slurm_fair.store import Store

        with Store(":memory:") as store:
            res = run_round(cluster, store, _CFG, dry_run=True)
            if res.status not in ("ok", "dry-run"):
                out.stopped = f"{res.status}: {res.message}"
            _no_surrogates(res.message, res.details.to_json() if res.details else None)
    return out


def squeue_text_case(name: bytes, comment: bytes) -> Outcome:
    """profile status's squeue line format (%i|%T|%a|%j|%b|%M|%k), a job name and comment of any bytes."""
    from slurm_fair.cli.profiles import parse_profile_jobs

    line = b"|".join([b"12", b"RUNNING", b"acct_a", name, b"gres/gpu:v100:1", b"1:00", comment + b" fair:profile"])
    text = (line + b"\n13|PENDING|acct_b|x|N/A|0:00|fair:profile\n").decode("utf-8", "replace")
    for j in parse_profile_jobs(text):
        _no_surrogates(j)
        assert isinstance(j["job_id"], int)
    return Outcome("squeue_text")


def hook_case(version: str, where: str, b: bytes, context: str, tmp: Path) -> Outcome:
    """A hook call whose job has ``b`` in ``where`` (name, comment, workdir, stdout, wckey), then ingest."""
    from slurm_fair.store import Store

    chunk = _SCONTROL[version][len(b) % len(_SCONTROL[version])]
    raw = chunk.encode()
    name = chunk.split(" JobName=", 1)[1].split("\n", 1)[0].encode()
    env_name = name
    if where == "name":
        raw = raw.replace(b" JobName=" + name + b"\n", b" JobName=" + name + b + b"\n", 1)
        env_name = name + b
    elif where == "wckey":
        line = next(ln for ln in raw.split(b"\n") if ln.startswith(b"   Priority="))
        raw = raw.replace(line, line + b" WCKey=" + b, 1)
    else:
        key = {"comment": b"   WorkDir=", "workdir": b"   WorkDir=", "stdout": b"   StdOut="}[where]
        line = next(ln for ln in raw.split(b"\n") if ln.startswith(key))
        raw = raw.replace(line, line + (b"\n   Comment=" + b if where == "comment" else b), 1)
    env = {"SLURM_SCRIPT_CONTEXT": context, "SLURM_JOB_ID": chunk.split()[0].split("=")[1],
           "SLURM_JOB_NAME": os.fsdecode(env_name), "SLURM_JOB_ACCOUNT": os.fsdecode(b"acct_" + b[:8]),
           "SLURM_JOB_USER": os.fsdecode(b[:6]), "SLURM_JOB_PARTITION": "gpu", "SLURMD_NODENAME": os.fsdecode(b[:10]),
           "SLURM_JOB_GPUS": os.fsdecode(b[:5]), "SLURM_JOB_EXIT_CODE2": os.fsdecode(b[:7]), "SLURM_JOB_RESTART_COUNT": "0"}
    real_run = jobrecord.run
    jobrecord.run = lambda exe, args, env, timeout: (0, raw.decode("utf-8", "surrogateescape"))
    try:
        rec = jobrecord.build_record(env, {"scontrol": "scontrol"})
        # the hook itself, with the bytes also in the variables it must refuse (job id, context, restart
        # count): it returns 0 whatever happens, and writes a record or logs one line
        conf = tmp / "hooks.conf"
        conf.write_text(f"spool={tmp / 'hookspool'}\nlog={tmp / 'hook.log'}\n")
        bad = dict(env, **{k: os.fsdecode(os.fsencode(env[k]) + b) for k in
                           ("SLURM_JOB_ID", "SLURM_SCRIPT_CONTEXT", "SLURM_JOB_RESTART_COUNT") if len(b) % 3 == 0})
        if jobrecord.hook(str(conf), bad) != 0:
            raise AssertionError("the hook returned non-zero")
        written = list((tmp / "hookspool").glob("*.json")) if (tmp / "hookspool").exists() else []
        if not written and not (tmp / "hook.log").exists():
            raise AssertionError("the hook neither wrote a record nor logged why")
        for f in written:
            json.loads(f.read_bytes().decode("utf-8"))
            f.unlink()
    finally:
        jobrecord.run = real_run
    typed, count = jobrecord.gpus_from_tres(_real_tres(chunk))
    if context.endswith("_slurmctld") and (rec["gpu_count"] not in (None, 0, count)
                                           or (rec["gpus"] and rec["gpus"] != typed)):
        raise AssertionError(f"forged GPUs: {rec['gpus']} / {rec['gpu_count']} (real {typed} / {count})")
    spool = tmp / "spool"
    jobrecord.write_record(str(spool), rec)
    with Store(":memory:") as store:
        res = ingest(store, spool)
        if res.error:
            raise AssertionError(f"ingest error: {res.error}")
        stored = store.job_records()
        _no_surrogates(*[r.data for r in stored])
    for f in spool.glob("*.json"):
        f.unlink()
    return Outcome("hook", note="quarantined" if res.bad else "")


def _real_tres(chunk: str) -> str:
    for key in ("   AllocTRES=", "   TRES="):
        if key in chunk:
            return chunk.split(key, 1)[1].split("\n", 1)[0]
    return ""


def spool_case(blobs: list[bytes], tmp: Path) -> Outcome:
    from slurm_fair.store import Store

    spool = tmp / "spool2"
    spool.mkdir(exist_ok=True)
    for i, b in enumerate(blobs):
        (spool / f"rec-{i}.json").write_bytes(b)
    with Store(":memory:") as store:
        res = ingest(store, spool)
    left = [p.name for p in spool.iterdir() if p.is_file() and p.name.startswith("rec-")]
    if left:
        raise AssertionError(f"left in the spool: {left} ({res})")
    for p in (spool / "bad").glob("*") if (spool / "bad").exists() else ():
        p.unlink()
    return Outcome("spool")


def _near_record(rng: random.Random) -> bytes:
    rec = {"v": 1, "event": "start", "context": "prolog_slurmctld", "job_id": rng.randint(1, 10 ** 6), "restart_count": 0,
           "time": 1.0, "account": "a", "gpus": {"v100": 1}, "gpu_count": 1}
    for _ in range(rng.randint(0, 3)):
        k = rng.choice(list(rec) + ["job_name", "class", "fair_tokens", "node", "exit_code", "nosuch"])
        rec[k] = rng.choice([os.fsdecode(hostile_bytes(rng)), 2 ** 70, -1, 1e308, None, [], {"x": "\udcff"}, True])
    return jobrecord.to_json(rec).encode()


KINDS = ("squeue", "squeue_text", "hook", "spool")


def random_case(rng: random.Random, kind: str) -> dict:
    """A case of ``kind`` drawn from ``rng`` (what the soak runs; hypothesis draws its own in the tests)."""
    if kind == "squeue":
        version = rng.choice(VERSIONS)
        n = len(_SQUEUE[version]["jobs"])
        fields = {(rng.randrange(n), rng.choice(USER_FIELDS_JSON)): hostile_bytes(rng) for _ in range(rng.randint(1, 6))}
        return {"kind": kind, "version": version, "fields": fields, "round_": rng.random() < 0.5}
    if kind == "squeue_text":
        return {"kind": kind, "name": hostile_bytes(rng), "comment": hostile_bytes(rng)}
    if kind == "hook":
        return {"kind": kind, "version": rng.choice(VERSIONS),
                "where": rng.choice(["name", "comment", "workdir", "stdout", "wckey"]), "b": hostile_bytes(rng),
                "context": rng.choice(list(jobrecord.CONTEXTS))}
    return {"kind": kind, "blobs": [hostile_bytes(rng, 200) if rng.random() < 0.4 else _near_record(rng)
                                    for _ in range(rng.randint(1, 4))]}


def run_case(case: dict, tmp: Path | None = None) -> Outcome:
    """Run one case; an exception escaping becomes ``Outcome.traceback`` (never raised here)."""
    kind = case["kind"]
    args = {k: v for k, v in case.items() if k != "kind"}
    try:
        if kind == "squeue":
            return squeue_case(**args)
        if kind == "squeue_text":
            return squeue_text_case(**args)
        with tempfile.TemporaryDirectory() if tmp is None else _Keep(tmp) as d:
            return hook_case(tmp=Path(d), **args) if kind == "hook" else spool_case(tmp=Path(d), **args)
    except Exception as e:  # noqa: BLE001 - what the soak counts
        return Outcome(kind, traceback=f"{type(e).__name__}: {str(e)[:300]}")


class _Keep:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> str:
        return str(self.path)

    def __exit__(self, *exc: Any) -> None:
        return None
