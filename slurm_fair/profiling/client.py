"""The job side of throughput reports: ``slurm_fair.report(...)`` and ``slurm-fair profile report``.

Standard library only (it runs inside users' jobs): importing it costs a few milliseconds.

Transport: Slurm itself. A report writes one token into the job's *own* comment with
``scontrol update JobId=$SLURM_JOB_ID Comment=...`` (an argument list, no shell). Slurm 22.05 lets a job's
owner change its comment (another user gets "Invalid user id") and refuses comments over 1024 characters
(checked on the testbed). The token is

    fair:tput=<steps per second>@<n>

where ``n`` counts the job's reports (1, 2, ...): the daemon takes a job's report once per ``n``, so a
report is never counted twice. ``profile run`` adds ``fair:gpu=<NVML device name, spaces as _>`` when
NVML named the device. Every other token of the comment (``class=NAME``, ``fair:flex``, free text) is kept;
an older ``fair:tput``/``fair:gpu`` token is replaced.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys

from ..jobrecord import parse_scontrol, split_tokens

TPUT = "fair:tput="
GPU = "fair:gpu="
PROFILE_TOKEN = "fair:profile"  # in the comment of jobs `profile submit` starts: their reports are "measured"
MAX_COMMENT = 1024  # Slurm 22.05 refuses a longer comment ("... too long for job N")


class ReportError(Exception):
    """A report could not be made (no job, bad number, Slurm refused the comment)."""


def format_token(throughput: float, n: int) -> str:
    return f"{TPUT}{throughput:.6g}@{int(n)}"


_DIGITS = frozenset("0123456789")
MAX_REPORT_N = 10 ** 9


def ascii_int(text: str) -> int | None:
    """``text`` as a whole number 1..10^9 written in ASCII digits only, else None. (``str.isdigit`` is true for
    ``'²'`` and ``'٣'`` too; ``int('²')`` raises and ``int('٣')`` is 3: neither is a report number.)"""
    if not text or len(text) > 10 or not all(c in _DIGITS for c in text):
        return None
    n = int(text)
    return n if 1 <= n <= MAX_REPORT_N else None


def ascii_number(text: str) -> float | None:
    """``text`` as a float when it matches the report grammar, else None::

        number   = digits [ "." [ digits ] ] [ exponent ] | "." digits [ exponent ]
        exponent = ( "e" | "E" ) [ "+" | "-" ] digits
        digits   = one or more of 0-9 (ASCII only)

    (what :func:`format_token` writes; no sign, no ``nan``/``inf``, no ``_``, no other scripts' digits, at most
    40 characters). Range checks are the daemon's."""
    if not text or len(text) > 40:
        return None
    mant, _, exp = text.replace("E", "e").partition("e")
    whole, dot, frac = mant.partition(".")
    if not all(c in _DIGITS for c in whole + frac) or not (whole or frac) or (dot and "." in frac):
        return None
    if "e" in text.replace("E", "e"):
        e = exp[1:] if exp[:1] in ("+", "-") else exp
        if not e or not all(c in _DIGITS for c in e):
            return None
    return float(text)


def parse_tokens(comment: str) -> dict[str, str]:
    """The ``fair:`` report tokens of a comment: ``{"tput": "<value>", "n": "<n>", "gpu": "<name>",
    "profile": ""}`` (keys present only when the token is; the last of each wins; values as text: the
    daemon validates them)."""
    out: dict[str, str] = {}
    for tok in split_tokens(comment):
        if tok.startswith(TPUT):
            value, _, n = tok[len(TPUT):].partition("@")
            out["tput"], out["n"] = value, n
        elif tok.startswith(GPU):
            out["gpu"] = tok[len(GPU):].replace("_", " ")
        elif tok == PROFILE_TOKEN:
            out["profile"] = ""
    return out


def with_tokens(comment: str, tokens: list[str]) -> str:
    """``comment`` with ``tokens`` replacing any token of the same kind (``fair:tput=``, ``fair:gpu=``);
    the other tokens keep their order; the new ones go last, separated by one space."""
    kinds = {t.split("=", 1)[0] + "=" for t in tokens}
    kept = [t for t in split_tokens(comment) if not any(t.startswith(k) for k in kinds)]
    return " ".join(kept + list(tokens))


def throughput_of(steps: float | None = None, seconds: float | None = None,
                  throughput: float | None = None) -> float:
    """steps/seconds, or throughput: a finite number > 0, or ReportError saying which argument is wrong."""
    if throughput is not None and (steps is not None or seconds is not None):
        raise ReportError("give either steps and seconds, or throughput")
    if throughput is None:
        if steps is None or seconds is None:
            raise ReportError("give steps and seconds (steps done in that many seconds), or throughput")
        for name, v in (("steps", steps), ("seconds", seconds)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ReportError(f"{name} must be a finite number > 0 (got {v!r})")
        throughput = steps / seconds
    if isinstance(throughput, bool) or not isinstance(throughput, (int, float)) or not math.isfinite(throughput) \
            or throughput <= 0:
        raise ReportError(f"throughput must be a finite number > 0 (got {throughput!r})")
    return float(throughput)


def _scontrol(args: list[str], timeout: float = 10.0) -> str:
    try:
        r = subprocess.run(["scontrol", *args], capture_output=True, text=True, encoding="utf-8", errors="replace",
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReportError(f"scontrol {args[0]}: {e}") from None
    if r.returncode != 0:
        raise ReportError(f"scontrol {' '.join(args[:2])}: {(r.stderr or r.stdout).strip() or 'exit ' + str(r.returncode)}")
    return r.stdout


def job_comment(job_id: str) -> str:
    """The job's comment now (``scontrol show job``); '' when it has none."""
    fields = parse_scontrol(_scontrol(["show", "job", str(job_id)]))
    c = fields.get("Comment", "")
    return "" if c == "(null)" else c


def write_tokens(job_id: str, tokens: list[str], comment: str | None = None) -> str:
    """Put ``tokens`` into the job's comment (see :func:`with_tokens`); returns the new comment."""
    new = with_tokens(job_comment(job_id) if comment is None else comment, tokens)
    if len(new) > MAX_COMMENT:
        raise ReportError(f"the job comment would be {len(new)} characters; Slurm takes at most {MAX_COMMENT}")
    _scontrol(["update", f"JobId={job_id}", f"Comment={new}"])
    return new


def _job_id(job_id: str | int | None) -> str:
    jid = str(job_id if job_id is not None else os.environ.get("SLURM_JOB_ID", "")).strip()
    if not jid.isdigit():
        raise ReportError("not inside a Slurm job (SLURM_JOB_ID is not set); name the job (--job, job_id=)")
    return jid


def report(steps: float | None = None, seconds: float | None = None, *, throughput: float | None = None,
           job_id: str | int | None = None) -> float:
    """Report this job's throughput (``steps`` done in ``seconds``, or ``throughput`` in steps/s) to
    slurm-fair through the job's comment. Returns the throughput reported. Raises ReportError."""
    value = throughput_of(steps, seconds, throughput)
    jid = _job_id(job_id)
    comment = job_comment(jid)
    prev = ascii_int(parse_tokens(comment).get("n", ""))
    n = prev + 1 if prev is not None and prev < MAX_REPORT_N else 1
    write_tokens(jid, [format_token(value, n)], comment)
    return value


def main(argv: list[str]) -> int:
    """``slurm-fair profile report`` (parsed here, without click, to stay light inside jobs)."""
    p = argparse.ArgumentParser(
        prog="slurm-fair profile report",
        description="Report this job's throughput to slurm-fair: writes fair:tput=<steps/s>@<n> into the job's "
                    "own comment (scontrol update); the daemon reads it at its next round and updates the "
                    "profile of the job's class on the GPU type Slurm gave the job. Run it inside a job "
                    "(SLURM_JOB_ID) or name the job with --job.")
    p.add_argument("--steps", type=float, help="steps (iterations, batches) done in --seconds")
    p.add_argument("--seconds", type=float, help="seconds the --steps took")
    p.add_argument("--throughput", type=float, help="steps per second (instead of --steps/--seconds)")
    p.add_argument("--job", default=None, help="job id (default: $SLURM_JOB_ID)")
    a = p.parse_args(argv)
    try:
        value = report(a.steps, a.seconds, throughput=a.throughput, job_id=a.job)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"reported {value:.6g} steps/s")
    return 0
