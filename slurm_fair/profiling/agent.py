"""The profiling agent: ``slurm-fair profile submit`` (one short job per GPU type) and ``profile run`` (on the
node). Standard library only; pynvml (package nvidia-ml-py) is imported inside :func:`read_nvml` only.

How a command reaches the node intact: ``profile submit`` never builds a shell string from it. The job's
settings (the command's argv, --seconds, --steps, --metric-regex) travel as JSON in the environment variable
``SLURM_FAIR_PROFILE`` of the ``sbatch`` call (sbatch exports the submitting environment to the job), and
the batch script, given to sbatch on stdin, is fixed: it execs this Python with ``profile run`` (the only
word in it, the interpreter's path, is shlex-quoted). ``profile run`` decodes the JSON and runs the argv
list with no shell.

Measurement (first that gives a number): (a) ``--metric-regex``: the last match over the command's output
(its first group if it has one, else the whole match) as steps/s; (b) the command's own reports
(``slurm_fair.report()`` / ``slurm-fair profile report``, read back from the job's comment); (c) ``--steps``
divided by the seconds the command ran, when it ended by itself with exit code 0. The command runs at most
``--seconds`` (then SIGTERM to its process group, then SIGKILL 10 s later). The result goes into the job's
comment as ``fair:tput=<steps/s>@<n>`` (and ``fair:gpu=<NVML name>``); the daemon reads it from the running
job or from the EpilogSlurmctld record once the job has ended.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from . import client

ENV = "SLURM_FAIR_PROFILE"
KILL_GRACE = 10.0
DEFAULT_SECONDS = 120.0
UPDATE_EVERY = 15.0  # seconds between interim reports written while the command runs (regex values)


def job_settings(argv: list[str], seconds: float | None, steps: float | None, regex: str | None) -> str:
    """The JSON ``profile run`` reads from $SLURM_FAIR_PROFILE."""
    return json.dumps({"argv": list(argv), "seconds": seconds, "steps": steps, "regex": regex})


def batch_script(python: str = sys.executable) -> str:
    """The fixed batch script of a profiling job (no word of the user's command is in it)."""
    return ("#!/bin/sh\n# slurm-fair profiling job: the command and options are in $SLURM_FAIR_PROFILE (JSON)\n"
            f"exec {shlex.quote(python)} -c 'from slurm_fair.entry import console_main; console_main()' "
            "profile run\n")


def sbatch_argv(account: str, cls: str, gpu_type: str, *, seconds: float | None, partition: str | None = None,
                name: str | None = None) -> list[str]:
    """The sbatch argument list of the profiling job of ``cls`` on ``gpu_type`` (one GPU)."""
    limit_min = max(1, math.ceil(((seconds or DEFAULT_SECONDS) + 2 * KILL_GRACE + 60) / 60)) if seconds else 60
    argv = ["sbatch", "--parsable", f"--account={account}", f"--job-name={name or 'profile-' + cls}",
            f"--gres=gpu:{gpu_type}:1", f"--comment=class={cls} {client.PROFILE_TOKEN}", f"--time={limit_min}",
            "--export=ALL"]
    if partition:
        argv.append(f"--partition={partition}")
    return argv


def read_nvml() -> tuple[list[dict], str]:
    """(one dict per visible device: index, name, memory_total_mib, utilization_gpu_pct; why empty)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError as e:
        return [], f"NVML: pynvml is not installed ({e}); the GPU type is the one Slurm allocated"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - pynvml raises NVMLError subclasses; no GPU or no driver
        return [], f"NVML: not available on this node ({e}); the GPU type is the one Slurm allocated"
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            try:
                util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            except Exception:  # noqa: BLE001 - some devices do not report it
                util = None
            out.append({"index": i, "name": name, "memory_total_mib": int(mem.total) // (1 << 20),
                        "utilization_gpu_pct": util})
        return out, ""
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


class Runner:
    """Runs the command, echoes its output and keeps the last regex value (thread-safe enough: one writer)."""

    def __init__(self, argv: list[str], regex: str | None):
        self.argv = argv
        self.pattern = re.compile(regex) if regex else None
        self.last: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            if self.pattern is not None:
                for m in self.pattern.finditer(line):
                    v = _number(m.group(1) if m.groups() else m.group(0))
                    if v is not None:
                        self.last = v

    def run(self, seconds: float | None, on_tick: Any = None) -> tuple[int | None, float, bool]:
        """(exit code or None, seconds it ran, ended by itself?)."""
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        deadline = None if seconds is None else t0 + seconds
        by_itself = True
        while True:
            try:
                self.proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            if on_tick is not None:
                on_tick(self)
            if deadline is not None and time.monotonic() >= deadline:
                by_itself = False
                self._signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=KILL_GRACE)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.proc.wait()
                break
        elapsed = time.monotonic() - t0
        reader.join(timeout=5)
        return self.proc.returncode, elapsed, by_itself

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass


def run_main(argv: list[str]) -> int:
    """``slurm-fair profile run``: inside a profiling job (module docstring)."""
    p = argparse.ArgumentParser(
        prog="slurm-fair profile run",
        description="Inside a job started by `slurm-fair profile submit`: run the command from $SLURM_FAIR_PROFILE "
                    "for a bounded time, measure its throughput and write fair:tput=<steps/s>@<n> into the job's "
                    "comment. Options override the JSON's settings; a COMMAND after -- replaces its argv.")
    p.add_argument("--seconds", type=float, default=None, help="run the command at most this long")
    p.add_argument("--steps", type=float, default=None, help="steps the command does (throughput = steps / seconds run)")
    p.add_argument("--metric-regex", default=None, help="regex over the output; its last match is the steps/s")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    a = p.parse_args(argv)
    try:
        settings = json.loads(os.environ.get(ENV) or "{}")
    except ValueError as e:
        print(f"error: ${ENV} is not JSON: {e}", file=sys.stderr)
        return 2
    cmd = [c for c in a.command if c != "--"] if a.command else settings.get("argv") or []
    if not cmd or not all(isinstance(c, str) for c in cmd):
        print(f"error: no command (give -- COMMAND ARGS, or ${ENV} from `slurm-fair profile submit`)", file=sys.stderr)
        return 2
    seconds = a.seconds if a.seconds is not None else settings.get("seconds")
    steps = a.steps if a.steps is not None else settings.get("steps")
    regex = a.metric_regex if a.metric_regex is not None else settings.get("regex")
    if seconds is None and steps is None:
        seconds = DEFAULT_SECONDS
    job = os.environ.get("SLURM_JOB_ID", "")
    devices, why = read_nvml()
    print(f"slurm-fair profile run: job {job or '-'}, command {cmd!r}, at most {seconds or 'unbounded'} s",
          flush=True)
    print(why or "NVML: " + "; ".join(f"GPU {d['index']}: {d['name']}, {d['memory_total_mib']} MiB, "
                                      f"{d['utilization_gpu_pct']}% busy" for d in devices), flush=True)
    gpu_token = [f"{client.GPU}{devices[0]['name'].replace(' ', '_')}"] if devices else []
    state = {"written": None, "at": time.monotonic()}

    def tick(r: Runner) -> None:  # interim reports, so the daemon sees the job while it runs
        if job and r.last is not None and r.last != state["written"] and time.monotonic() - state["at"] >= UPDATE_EVERY:
            try:
                client.report(throughput=r.last, job_id=job)
                state["written"], state["at"] = r.last, time.monotonic()
            except client.ReportError as e:
                print(f"slurm-fair profile run: interim report failed: {e}", file=sys.stderr, flush=True)

    runner = Runner(cmd, regex)
    try:
        rc, elapsed, by_itself = runner.run(float(seconds) if seconds else None, tick)
    except OSError as e:
        print(f"error: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
        return 2
    how, value = "", None
    if runner.last is not None:
        how, value = "metric regex (last match)", runner.last
    own = None
    if job:
        try:
            own = client.parse_tokens(client.job_comment(job))
        except client.ReportError as e:
            print(f"slurm-fair profile run: cannot read the job comment: {e}", file=sys.stderr)
    if value is None and own and own.get("tput") and state["written"] is None:
        how, value = "the command's own reports", _number(own["tput"])
    if value is None and steps and by_itself and rc == 0 and elapsed > 0:
        how, value = f"{steps:g} steps in {elapsed:.3g} s", float(steps) / elapsed
    print(f"slurm-fair profile run: command {'ended with exit code ' + str(rc) if by_itself else 'stopped after the time bound'}"
          f" after {elapsed:.3g} s", flush=True)
    if value is None:
        print("slurm-fair profile run: no throughput measured (no regex match, no report, no --steps)", file=sys.stderr)
        return 1
    if not job:
        print(f"throughput {value:.6g} steps/s ({how}); not in a Slurm job: nothing reported")
        return 0
    if how == "the command's own reports":  # already in the comment: writing it again would count it twice
        if gpu_token:
            try:
                client.write_tokens(job, gpu_token)
            except client.ReportError as e:
                print(f"slurm-fair profile run: {e}", file=sys.stderr)
        print(f"slurm-fair profile run: the command reported {value:.6g} steps/s itself", flush=True)
        return 0
    try:
        prev = (own or {}).get("n", "0")
        n = int(prev) + 1 if prev.isdigit() else 1
        client.write_tokens(job, [client.format_token(value, n), *gpu_token])
    except client.ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"slurm-fair profile run: reported {value:.6g} steps/s ({how})", flush=True)
    return 0
