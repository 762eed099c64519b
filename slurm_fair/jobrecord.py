"""Job start/end records written by the Slurm hooks (stdlib only, runnable by path, never raises).

Slurm runs the shim ``hooks/slurm-fair-hook`` as PrologSlurmctld, EpilogSlurmctld, Prolog and Epilog; the
shim runs ``python3 -I -S <dir>/jobrecord.py hook <dir>/hooks.conf`` under ``timeout``. This module must
stay importable without the slurm_fair package (no package imports, nothing outside the standard library):
slurmctld runs hooks with the system python3 and no PATH.

Rules:

* **One file per hook call**: ``<spool>/<job>.<restart>.<event>.<context>[.<node>].json``, written to a
  hidden temp file in the spool and renamed, so a reader sees a whole record or none. Hooks of different
  jobs run in parallel; no file is ever appended to.
* **Never fails a job**: ``main`` exits 0 on every error, logging one line to ``log=`` from hooks.conf (else
  ``<spool>.log``, else stderr). A record without GPU information says why in ``gpu_info``.
* **Event**: ``start`` for prolog_slurmctld / prolog_slurmd, ``end`` for the epilogs (SLURM_SCRIPT_CONTEXT).
* **GPUs**: controller hooks get no GPU information from Slurm; they run ``scontrol show job -d <id>``
  (argument list, ``scontrol_timeout`` seconds, default 2; its text trusted only where Slurm wrote it, see
  :func:`parse_scontrol_checked`) and read AllocTRES (24.11) or TRES (22.05):
  ``gres/gpu:<type>=N`` per type, ``gres/gpu=N`` total. The same output gives the class (a ``class=NAME``
  token in the comment, else the wckey, else the job name: ``daemon/plan.py::job_class``'s default order)
  and Slurm's StartTime/EndTime of this run, and ``fair_tokens``: the comment's ``fair:`` tokens (throughput
  reports, ``slurm_fair/profiling/client.py``), which the daemon harvests from the end record of a job that
  reported just before it ended. slurmd hooks record the device indices (SLURM_JOB_GPUS or
  CUDA_VISIBLE_DEVICES) and the node, without a type and without calling scontrol.
* **Requeue**: Slurm counts a requeued run's restart before its EpilogSlurmctld runs (SLURM_JOB_RESTART_COUNT
  is already N+1, scontrol shows EndTime=Unknown, RunTime=00:00:00): that end record is filed under
  restart N with ``requeued`` true. slurmd epilogs cannot tell and keep the count Slurm gives them.
* **Times**: ``time`` is the hook's clock; ``start_time``/``end_time`` are Slurm's (second resolution)
  when scontrol answered for this very run (same restart count) and the time is not in the future.
  ``submit_time`` is Slurm's SubmitTime of the job (controller hooks, when scontrol answered and it is not in
  the future; Slurm may move it on a requeue, so the daemon takes the earliest of a job's records): with it
  ``slurm-fair report`` gives queue wait (start - submit) and job completion time (end - submit).

hooks.conf (``key=value`` lines, ``#`` comments): ``spool`` (default /var/spool/slurm-fair/records),
``log``, ``slurm_conf`` (SLURM_CONF for scontrol: controller hooks get none), ``scontrol`` (default: found
on PATH), ``scontrol_timeout``.
"""

from __future__ import annotations

import os
import sys
import time

# Only os, sys, time (and select for scontrol) are imported: json, re, subprocess and time.strptime pull in
# enum/collections/threading and cost ~30 ms per call, which is most of a hook's budget on the job path.

FORMAT_VERSION = 1
DEFAULT_SPOOL = "/var/spool/slurm-fair/records"
CONF_NAME = "hooks.conf"
SHIM_NAME = "slurm-fair-hook"
CONTEXTS = {
    "prolog_slurmctld": "start",
    "epilog_slurmctld": "end",
    "prolog_slurmd": "start",
    "epilog_slurmd": "end",
}
SLURM_CONF_KEYS = {  # slurm.conf key -> context it runs in
    "PrologSlurmctld": "prolog_slurmctld",
    "EpilogSlurmctld": "epilog_slurmctld",
    "Prolog": "prolog_slurmd",
    "Epilog": "epilog_slurmd",
}
_SEPARATORS = " \t\n\r\f\v,;"  # between tokens (class=NAME, fair:...): ASCII only, as Lua's %s (one grammar)
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def read_conf(path: str) -> dict[str, str]:
    """``key=value`` lines; a missing file gives {} (defaults)."""
    conf: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    conf[k.strip()] = v.strip()
    except FileNotFoundError:
        pass
    return conf


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v not in (None, "") else None
    except ValueError:
        return None


def _slurm_time(v: str | None) -> float | None:
    """Slurm's local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds (None for Unknown/None/N/A)."""
    try:
        date, clock = (v or "").split("T")
        y, mo, d = (int(x) for x in date.split("-"))
        h, mi, sec = (int(x) for x in clock.split(":"))
        return time.mktime((y, mo, d, h, mi, sec, 0, 0, -1))
    except (ValueError, OverflowError):
        return None


# The lines Slurm writes before the first free-text field, by their first key, in Slurm's order (22.05, 24.11,
# 26.05; older and optional lines as seen elsewhere); keys are read only from these lines (see
# parse_scontrol_checked). 26.05 writes a SLUID= line (the job's Slurm-wide unique id) first, before UserId=.
_FIRST = ("SLUID", "UserId")
_ORDER = ("SLUID", "UserId", "Priority", "JobState", "Requeue", "DerivedExitCode", "RunTime", "SubmitTime", "AccrueTime",
          "StartTime", "PreemptEligibleTime", "PreemptTime", "SuspendTime", "Partition", "ReqNodeList", "NodeList",
          "BatchHost", "NumNodes", "TRES", "ReqTRES", "AllocTRES")
_RANK = {h: i for i, h in enumerate(_ORDER)}
_HEADER_END = frozenset({"MinCPUsNode", "Features", "OverSubscribe", "Shared", "Command", "WorkDir", "Comment",
                         "AdminComment", "SystemComment", "StdErr", "StdIn", "StdOut", "JobId"})
_FREE_TEXT_LINES = ("Comment=", "AdminComment=", "SystemComment=")


def parse_scontrol_checked(text: str, name: str | None = None) -> tuple[dict[str, str], str]:
    """``scontrol show job -d <id>`` (multi-line form) as (key -> value, problem). A job name,
    comment, work dir, output path, wckey... may hold anything, line breaks too, so values are trusted only
    where Slurm wrote them (the rule):

    * line 0 is ``JobId=N [...] JobName=<name>``; ``name`` (the hook's SLURM_JOB_NAME) is cut off exactly,
      line breaks and all; without it (or when it does not match) the name runs to the end of line 0;
    * then the header, up to the first free-text line (Features=, Command=, WorkDir=, Comment=...): keys are
      read only from Slurm's own lines there (_ORDER, by their first key), which must come in Slurm's order,
      the first right after the name being UserId= (26.05: SLUID=, then UserId=), each once and none after the header in the whole text
      (so a listing of several jobs, a heterogeneous job's, gives no header fields); a wckey (the job's own)
      is the rest of its line;
    * ``Comment`` (and AdminComment, SystemComment) is the rest of the first line after the header that starts
      with it (a line break ends it).

    A header line out of place (a forged ``\n   TRES=...`` after the name or wckey, a second copy anywhere)
    gives no header keys and the problem says why: a record then has no GPU information, never a forged one."""
    text = text.replace("\r\n", "\n")
    if not text.startswith("JobId="):
        return {}, "scontrol: no JobId= at the start of its output"
    first, _, rest = text.partition("\n")
    head, sep, after = text.partition(" JobName=")
    out: dict[str, str] = {}
    if sep and "\n" not in head:
        if name is not None and after.startswith(name + "\n"):
            out["JobName"], rest = name, after[len(name) + 1:]
        else:
            out["JobName"] = first[len(head) + len(sep):]
    for tok in (head if sep and "\n" not in head else first).split():
        k, eq, v = tok.partition("=")
        if eq:
            out.setdefault(k, v)
    lines = rest.split("\n")
    heads = [ln.strip().split("=", 1)[0] if ln.startswith(" ") and "=" in ln else "" for ln in lines]
    n_header = next((i for i, h in enumerate(heads) if not h or h in _HEADER_END), len(lines))
    seen: dict[str, int] = {}
    for h in heads:
        seen[h] = seen.get(h, 0) + 1
    problem, last = "", -1
    for i in range(max(1, n_header)):
        h = heads[i] if i < len(heads) else ""
        if (i == 0 and h not in _FIRST) or (i == 1 and heads[0] == "SLUID" and h != "UserId") or (h in _RANK and (_RANK[h] <= last or seen[h] > 1)):
            problem = (f"scontrol: a {h or 'text'} line where Slurm writes none (a job name or field with a line "
                       "break?): no field of its header is trusted")
            break
        last = _RANK.get(h, last)
    late = next((h for h in heads[n_header:] if h in _RANK), "")
    if late and not problem:
        problem = (f"scontrol: a {late} line after its free text (a field with a line break?): no field of its "
                   "header is trusted")
    for i in range(0 if problem else n_header):
        if heads[i] in _RANK:
            for tok in lines[i].split():
                k, eq, v = tok.partition("=")
                if k == "WCKey":  # last on its line: the rest of the line is its value
                    out.setdefault(k, lines[i].split(" WCKey=", 1)[1].strip())
                    break
                if eq:
                    out.setdefault(k, v)
    for ln in lines[n_header:]:
        s = ln.strip()
        if s.startswith("JobId="):
            break  # a second job (heterogeneous/array listing)
        for key in _FREE_TEXT_LINES:
            if s.startswith(key):
                out.setdefault(key[:-1], s[len(key):])
    return out, problem


def parse_scontrol(text: str, name: str | None = None) -> dict[str, str]:
    """The fields :func:`parse_scontrol_checked` trusts (a problem only leaves header keys out)."""
    return parse_scontrol_checked(text, name)[0]


def gpus_from_tres(tres: str) -> tuple[dict[str, int], int]:
    """``cpu=1,gres/gpu=2,gres/gpu:a100=2`` -> ({"a100": 2}, 2). Untyped GPUs count in the total only."""
    typed: dict[str, int] = {}
    total = 0
    for item in tres.split(","):
        key, _, count = item.strip().partition("=")
        if not count.isdigit() or not (key == "gres/gpu" or key.startswith("gres/gpu:")):
            continue
        gpu_type = key[len("gres/gpu:"):]
        if gpu_type:
            typed[gpu_type] = typed.get(gpu_type, 0) + int(count)
        else:
            total = int(count)
    return typed, max(total, sum(typed.values()))


def split_tokens(text: str) -> list[str]:
    """The words of a job comment, split at whitespace, ``,`` and ``;`` (empty words dropped)."""
    out, cur = [], ""
    for ch in text or "":
        if ch in _SEPARATORS:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + ([cur] if cur else [])


def comment_class(comment: str) -> str | None:
    """The NAME of the first ``class=NAME`` token of a comment (tokens end at ASCII whitespace, ``,`` or ``;``
    only — the grammar the daemon, this hook and job_submit.lua share: a no-break space, ``\x1c`` or ``\x85``
    before ``class=`` does not start a token anywhere); None if none."""
    text = comment or ""
    start = 0
    while (i := text.find("class=", start)) >= 0:
        start = i + 1
        if i == 0 or text[i - 1] in _SEPARATORS:
            j = i + len("class=")
            k = j
            while k < len(text) and text[k] not in _SEPARATORS:
                k += 1
            if k > j:
                return text[j:k]
    return None


def job_class(comment: str, wckey: str, name: str) -> str:
    """``daemon/plan/demand.py::job_class`` with the default order (comment, wckey, name); "" if none."""
    found = comment_class(comment)
    if found is not None:
        return found
    wk = (wckey or "").lstrip("*")
    return wk or name or ""


def scontrol_job(job_id: str, conf: dict[str, str], env: dict[str, str],
                 name: str | None = None) -> tuple[dict[str, str] | None, str]:
    """(fields, problem) or (None, why). ``name``: the job's name as the hook's environment gives it (a byte
    that is not UTF-8 as a lone surrogate, as scontrol's output is read here); values come back as clean text."""
    exe = conf.get("scontrol") or "scontrol"
    try:
        timeout = float(conf.get("scontrol_timeout") or 2)
    except ValueError:
        timeout = 2.0
    cenv = dict(env)
    if conf.get("slurm_conf"):
        cenv["SLURM_CONF"] = conf["slurm_conf"]
    cenv.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    try:
        rc, out = run(exe, ["show", "job", "-d", str(job_id)], cenv, timeout)
    except TimeoutError:
        return None, f"scontrol timed out after {timeout:g} s"
    except OSError as e:
        return None, f"scontrol: {e}"
    if rc != 0:
        return None, clean_text(f"scontrol exited {rc}: {out.strip()[:200]}")
    fields, problem = parse_scontrol_checked(out, name)
    return {k: clean_text(v) for k, v in fields.items()}, problem


def run(exe: str, args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``exe args`` (an argument list, looked up on env's PATH) with stdin from /dev/null; return
    (exit status, stdout+stderr). Kills it and raises TimeoutError after ``timeout`` seconds. (os.posix_spawn
    and select instead of subprocess, which costs ~10 ms to import.)"""
    import select

    r, w = os.pipe()
    try:
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_DUP2, w, 2), (os.POSIX_SPAWN_CLOSE, r)]
        spawn = os.posix_spawnp if os.sep not in exe else os.posix_spawn
        pid = spawn(exe, [exe, *args], env, file_actions=actions)
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    os.close(w)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise TimeoutError
            data = os.read(r, 65536)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "surrogateescape")


def clean_text(v: str) -> str:
    """``v`` as text that is valid UTF-8: a byte that was not UTF-8 (``os.environ`` keeps it as a lone surrogate,
    e.g. in SLURM_JOB_NAME) becomes U+FFFD. A record must be storable whatever bytes a user put in a job name."""
    if not any("\ud800" <= c <= "\udfff" for c in v):
        return v
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in v)


def build_record(env: dict[str, str], conf: dict[str, str], now: float | None = None) -> dict:
    """The record for this hook call, from the hook environment (and scontrol for controller hooks).
    Raises ValueError when the environment is not a Slurm hook's (no job id or unknown context)."""
    now = time.time() if now is None else now
    raw_name = env.get("SLURM_JOB_NAME")
    env = {k: clean_text(v) for k, v in env.items()}
    context = env.get("SLURM_SCRIPT_CONTEXT", "")
    if context not in CONTEXTS:
        raise ValueError(f"SLURM_SCRIPT_CONTEXT: not a slurm-fair hook context (got {context!r})")
    job_id = _int(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))
    if job_id is None:
        raise ValueError(f"SLURM_JOB_ID: not a job id (got {env.get('SLURM_JOB_ID')!r})")
    restart = _int(env.get("SLURM_JOB_RESTART_COUNT")) or 0
    event = CONTEXTS[context]
    rec: dict = {
        "v": FORMAT_VERSION, "event": event, "context": context, "job_id": job_id, "restart_count": restart,
        "time": now, "account": env.get("SLURM_JOB_ACCOUNT", ""), "user": env.get("SLURM_JOB_USER", ""),
        "uid": _int(env.get("SLURM_JOB_UID")), "partition": env.get("SLURM_JOB_PARTITION", ""),
        "job_name": env.get("SLURM_JOB_NAME", ""), "class": "",
        "node": env.get("SLURMD_NODENAME", ""),
        "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", ""),
        "gpus": {}, "gpu_count": None, "gpu_indices": "", "gpu_info": "",
        "start_time": None, "end_time": None, "submit_time": None,
        "exit_code": None, "exit_signal": None, "exit_status": None, "derived_exit_code": None,
        "job_state": "", "requeued": False,
    }
    if event == "end":
        ec2 = env.get("SLURM_JOB_EXIT_CODE2", "")
        if ":" in ec2:
            rec["exit_code"], rec["exit_signal"] = _int(ec2.split(":", 1)[0]), _int(ec2.split(":", 1)[1])
        rec["exit_status"] = _int(env.get("SLURM_JOB_EXIT_CODE"))
        rec["derived_exit_code"] = env.get("SLURM_JOB_DERIVED_EC") or None
    if context.endswith("_slurmd"):
        idx = env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or ""
        idx = "" if idx in ("NoDevFiles",) else idx
        rec["gpu_indices"] = idx
        rec["gpu_count"] = len([i for i in idx.split(",") if i.strip()])
        rec["gpu_info"] = "slurmd: device indices on this node, type not given to node hooks"
        return rec
    fields, why = scontrol_job(str(job_id), conf, env, raw_name)
    if fields is None:
        rec["gpu_info"] = f"none: {why}"
        return rec
    tres = fields.get("AllocTRES") or fields.get("TRES") or ""
    rec["job_state"] = fields.get("JobState", "")
    if (event == "end" and restart > 0 and _slurm_time(fields.get("EndTime")) is None
            and fields.get("RunTime") in ("00:00:00", "0:00")):
        # a requeued run: Slurm has already counted the restart, reset StartTime to the requeue and EndTime to
        # Unknown when EpilogSlurmctld runs (22.05, checked on the testbed): this ends the previous run
        restart = rec["restart_count"] = restart - 1
        rec["requeued"] = True
    rec["gpus"], rec["gpu_count"] = gpus_from_tres(tres)
    rec["gpu_info"] = f"none: {why}" if why else "scontrol " + ("AllocTRES" if fields.get("AllocTRES") else "TRES")
    rec["class"] = job_class(fields.get("Comment", ""), fields.get("WCKey", ""),
                             fields.get("JobName") or rec["job_name"])
    # throughput reports (fair:tput=..., fair:gpu=..., fair:profile; slurm_fair/profiling/client.py): the
    # daemon harvests them from the end record of a job that reported just before it ended
    rec["fair_tokens"] = " ".join(t for t in split_tokens(fields.get("Comment", "")) if t.startswith("fair:"))
    rec["job_name"] = rec["job_name"] or fields.get("JobName", "")
    rec["account"] = rec["account"] or fields.get("Account", "")
    sub = _slurm_time(fields.get("SubmitTime"))
    rec["submit_time"] = sub if sub is not None and sub <= now + 1 else None
    if _int(fields.get("Restarts")) == restart:
        st = _slurm_time(fields.get("StartTime"))
        et = _slurm_time(fields.get("EndTime")) if event == "end" else None
        rec["start_time"] = st if st is not None and st <= now + 1 else None
        rec["end_time"] = et if et is not None and et <= now + 1 else None
    return rec


def to_json(v: object) -> str:
    """JSON text of None/bool/int/float/str/dict/list values (keys sorted); json.loads reads it back."""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        if v != v or v in (float("inf"), float("-inf")):
            return "null"
        return repr(v)
    if isinstance(v, str):
        out = ['"']
        for c in v:
            if c == '"' or c == "\\":
                out.append("\\" + c)
            elif c < " " or c in "\u2028\u2029" or "\ud800" <= c <= "\udfff":
                out.append(f"\\u{ord(c):04x}")
            else:
                out.append(c)
        out.append('"')
        return "".join(out)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{to_json(str(k))}: {to_json(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(to_json(x) for x in v) + "]"
    return to_json(str(v))


def record_name(rec: dict) -> str:
    parts = [str(rec["job_id"]), str(rec["restart_count"]), rec["event"], rec["context"]]
    if rec.get("node"):
        parts.append("".join(c if c in _SAFE else "_" for c in rec["node"]))
    return ".".join(parts) + ".json"


def write_record(spool: str, rec: dict) -> str:
    """Write ``rec`` atomically (temp file + fsync + rename) into ``spool``; returns the path."""
    os.makedirs(spool, mode=0o755, exist_ok=True)
    final = os.path.join(spool, record_name(rec))
    # a random name, created new (O_EXCL) and never through a link (O_NOFOLLOW): a symlink planted in the spool
    # under a guessable name is not followed (issue 30 item 8)
    tmp = os.path.join(spool, f".{record_name(rec)}.{os.getpid()}.{os.urandom(8).hex()}.tmp")
    data = (to_json(rec) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.unlink(tmp)
        raise
    return final


def _log(conf: dict[str, str], spool: str, msg: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} slurm-fair-hook[{os.getpid()}]: {msg}\n"
    for path in (conf.get("log"), spool.rstrip("/") + ".log"):
        if not path:
            continue
        try:
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:  # any byte in env
                f.write(line)
            return
        except OSError:
            continue
    try:
        sys.stderr.write(line)
    except Exception:  # noqa: BLE001 - nothing left to report to
        pass


def hook(conf_path: str, env: dict[str, str] | None = None) -> int:
    """The hook: build and write this call's record. Returns 0 whatever happens (errors are logged)."""
    conf: dict[str, str] = {}
    spool = DEFAULT_SPOOL
    try:
        conf = read_conf(conf_path)
        spool = conf.get("spool") or DEFAULT_SPOOL
        env = dict(os.environ) if env is None else env
        write_record(spool, build_record(env, conf))
    except BaseException as e:  # noqa: BLE001 - a hook must never fail a job
        _log(conf, spool, f"job {(env or {}).get('SLURM_JOB_ID', '?')} "
                          f"{(env or {}).get('SLURM_SCRIPT_CONTEXT', '?')}: record not written: "
                          f"{type(e).__name__}: {e}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "hook":
        return hook(argv[1])
    sys.stderr.write("usage: jobrecord.py hook CONF (installing: hookinstall.py install DEST ...)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
