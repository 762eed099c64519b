"""slurm-fair profiles … and slurm-fair profile …: throughput profiles in the database (list, import, export,
set, delete), and the profiling agent (submit, run, report, status). The work is in slurm_fair/profiling/
(``profile run`` and ``profile report`` are dispatched there by slurm_fair/entry.py before this module is
imported: they run inside jobs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import click

from .. import config as config_mod
from ..cluster import connect
from ..config import Config
from ..errors import InputError, SlurmFairError
from ..profiling import agent, client
from ..profiling import shipped as shipped_profiles
from ..catalog import PROFILE_SOURCES as SOURCES
from ..text import printable
from .common import config_option, decode_utf8, handle_errors, json_option
from .table import render

if TYPE_CHECKING:
    from ..store import ProfileReport, ProfileValue








def _open_store(config_path: str | None) -> "Store":
    cfg = config_mod.load(config_path)
    from ..store import Store

    return Store(cfg.database_path)


def _bounds(cfg: Config) -> tuple[float, float]:
    """The bounds every stored throughput must meet: a job report's (``[profiling] min_throughput ..
    max_throughput``; issue 41: ``profiles import`` took 1e300)."""
    return float(cfg.profiling.min_throughput), float(cfg.profiling.max_throughput)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


@click.group("profiles")
def profiles_group() -> None:
    """Job-class throughput profiles (steps/s per GPU type), kept in slurm-fair's database.

    A profile is (account, class, GPU type) -> throughput; the empty account applies to every account, a
    named account overrides it. The policies compare GPU types by these numbers.
    """


def list_rows(values: list[ProfileValue], cfg: Config, now: float) -> list[dict]:
    """``profiles list`` rows: every stored value (all sources side by side) with ``used`` (the value the
    policies use for that key), ``stale``/``single`` flags and ``speedup`` (throughput over the lowest
    throughput of the same account, class and source)."""
    from ..profiling.core import Rules, flags
    from ..profiling.trust import effective_values

    rules = Rules.from_config(cfg.profiling)
    used = {(r.account, r.cls, r.gpu_type, r.source)  # as the rounds pick them ([profiling] on_conflict)
            for r in effective_values(values, rules.conflict_margin, cfg.profiling.on_conflict,
                                      rules.prefer_measured, bool(cfg.profiling.measured_speeds))[0]}
    slowest: dict[tuple[str, str, str], float] = {}
    for r in values:
        k = (r.account, r.cls, r.source)
        slowest[k] = min(slowest.get(k, float("inf")), float(r.throughput))
    out = []
    for r in values:
        row = {"account": r.account, "class": r.cls, "gpu_type": r.gpu_type, "throughput": r.throughput,
               "source": r.source, "samples": r.samples, "updated": r.updated, "rejected": r.rejected,
               "detail": r.detail}
        row["speedup"] = float(r.throughput) / slowest[(r.account, r.cls, r.source)]
        row.update(flags(r, now, rules))
        row["used"] = (r.account, r.cls, r.gpu_type, r.source) in used
        out.append(row)
    return out


@profiles_group.command("list")
@config_option
@click.option("--account", default=None, help="Only this account ('' = the every-account profiles).")
@click.option("--class", "cls", default=None, help="Only this job class.")
@click.option("--source", type=click.Choice(SOURCES), default=None, help="Only values of this source.")
@json_option(help="Print JSON (a list of objects) instead of a table.")
@handle_errors
def list_cmd(config_path: str | None, account: str | None, cls: str | None, source: str | None,
             as_json: bool) -> None:
    """List the stored profiles: every source's value side by side.

    SOURCE is imported | set (reported by a person), measured (a `profile submit` job), harvested (reports
    of running jobs) or shipped. USED marks the value the policies use for that account, class and type
    (an account's class with any measured value uses measured values only, [profiling] measured_speeds;
    else reported wins, measured fills gaps, or wins with [profiling] prefer_measured). SPEEDUP is relative to
    the slowest type of the same account, class and source. FLAGS: stale (no sample for
    [profiling] stale_after seconds), single (one sample), N rejected (outlier samples refused). Reads the
    database read-only; without one it lists none and says so on stderr (none is created).
    """
    from ..store import Store

    cfg = config_mod.load(config_path)
    if cfg.database_path.is_file():
        with Store(cfg.database_path, read_only=True) as store:
            values = store.profile_values()
    else:
        click.echo(f"note: no database at {cfg.database_path} (daemon.database) yet; nothing was created", err=True)
        values = []
    rows = [r for r in list_rows(values, cfg, time.time())
            if (account is None or r["account"] == account) and (cls is None or r["class"] == cls)
            and (source is None or r["source"] == source)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no profiles (load the shipped defaults with: slurm-fair profiles import --shipped)")
        return
    click.echo(_table(
        ["ACCOUNT", "CLASS", "GPU_TYPE", "THROUGHPUT", "SPEEDUP", "SAMPLES", "SOURCE", "USED", "FLAGS"],
        [[r["account"] or "*", r["class"], r["gpu_type"], _fmt(r["throughput"]), f"{r['speedup']:.2f}",
          r["samples"], r["source"], "*" if r["used"] else "",
          ",".join([f for f in ("stale", "single") if r[f]] + ([f"{r['rejected']} rejected"] if r["rejected"] else []))]
         for r in rows],
    ))


@profiles_group.command("import")
@config_option
@click.argument("file", type=click.File("rb"), required=False)
@click.option("--shipped", "shipped", is_flag=False, flag_value="gavel", default=None, metavar="[NAME]",
              help="Import a table shipped with slurm-fair: gavel (default: Gavel's K80/P100/V100 "
                   "measurements) or gandiva-fair (Gandiva_fair's Table 1: K80/P40/P100/V100).")
@handle_errors
def import_cmd(config_path: str | None, file: Any, shipped: str | None) -> None:
    """Add or replace profiles from a CSV FILE ('-' = stdin), or a shipped table (--shipped [NAME]).

    The header must be exactly: account,class,gpu_type,throughput. An empty account means every account.
    Every row is checked before anything is written: one bad row (named by line and column) imports nothing.
    A throughput must be a finite number within [profiling] min_throughput..max_throughput (the bounds a
    job's report must meet; default 1e-06..1e+07).
    Values from a FILE have source "imported" (a tenant's reported profile), from --shipped "shipped".
    """
    if (shipped is not None) == (file is not None):
        raise InputError("FILE", getattr(file, "name", "-") if file else None, "give either a CSV FILE or --shipped")
    if shipped is not None:
        text, source, detail = shipped_profiles.shipped_csv(shipped), "shipped", shipped
    else:
        name = getattr(file, "name", "-")
        name = "<stdin>" if name in ("-", "<stdin>") or not isinstance(name, str) else name
        text, source, detail = decode_utf8(file.read(), name), "imported", name
    cfg = config_mod.load(config_path)
    with _open_store(config_path) as store:
        n = store.import_csv(text, source=source, detail=detail, bounds=_bounds(cfg))
    click.echo(f"imported {n} profile(s)")


@profiles_group.command("export")
@config_option
@click.argument("file", type=click.File("w", encoding="utf-8", lazy=True), default="-", required=False)
@handle_errors
def export_cmd(config_path: str | None, file: Any) -> None:
    """Write the profiles the policies use (one value per account, class, type) as CSV to FILE (default:
    stdout); `profiles import` reads it back (as imported values). Reads the database read-only; without one it
    exits 1 naming it (none is created)."""
    from ..daemon.bounded import round_profiles
    from ..store import open_existing

    cfg = config_mod.load(config_path)
    with open_existing(cfg.database_path) as store:
        text = store.export_csv(round_profiles(store, cfg))  # what the rounds use, as they pick it
    file.write(text)


@profiles_group.command("set")
@config_option
@click.argument("cls", metavar="CLASS")
@click.argument("gpu_type")
@click.argument("throughput")
@click.option("--account", default="", help="Account this profile is for (default: every account).")
@handle_errors
def set_cmd(config_path: str | None, cls: str, gpu_type: str, throughput: str, account: str) -> None:
    """Set the THROUGHPUT (steps/s, within [profiling] min_throughput..max_throughput) of job class CLASS on
    GPU_TYPE (source "set": a reported value)."""
    cfg = config_mod.load(config_path)
    with _open_store(config_path) as store:
        store.set_profile(cls, gpu_type, throughput, account=account, bounds=_bounds(cfg))
    click.echo(f"set {cls} on {gpu_type} = {throughput}" + (f" for account {account}" if account else ""))


@profiles_group.command("delete")
@config_option
@click.argument("cls", metavar="CLASS")
@click.option("--account", default="", help="Account whose profile to delete (default: the every-account one).")
@click.option("--gpu-type", default=None, help="Only this GPU type (default: all GPU types of CLASS).")
@click.option("--source", type=click.Choice(SOURCES), default=None, help="Only values of this source (default: all).")
@handle_errors
def delete_cmd(config_path: str | None, cls: str, account: str, gpu_type: str | None, source: str | None) -> None:
    """Delete the profiles of job class CLASS. Exits 1 if there was none."""
    with _open_store(config_path) as store:
        n = store.delete_profiles(cls, account=account, gpu_type=gpu_type, source=source)
    click.echo(f"deleted {n} profile(s)")
    if n == 0:
        sys.exit(1)


@click.group("profile")
def profile_group() -> None:
    """Measure job classes on GPU types: a profiling agent, and reports from running jobs.

    Results travel through Slurm: a job writes fair:tput=<steps/s>@<n> into its own comment; the daemon reads
    it at its next round and updates the class's profile (see `slurm-fair profiles list`).
    """


@profile_group.command("submit", context_settings={"ignore_unknown_options": True})
@config_option
@click.option("--account", required=True, help="Account the profiling jobs run under (the profile is its).")
@click.option("--class", "cls", required=True, help="Job class to profile (class=NAME in the jobs' comment).")
@click.option("--types", default=None, help="GPU types, comma-separated (default: every GPU type of the cluster).")
@click.option("--seconds", type=float, default=None,
              help=f"Run the command this long on each type (default {agent.DEFAULT_SECONDS:g} unless --steps).")
@click.option("--steps", type=float, default=None,
              help="The command does this many steps and ends: throughput = steps / its run time.")
@click.option("--metric-regex", default=None,
              help="Regex over the command's output; its last match (first group, if any) is the steps/s.")
@click.option("--partition", default=None, help="Partition to submit to (default: Slurm's default).")
@click.option("--python", "python", default=None, metavar="PATH",
              help="Python that runs `profile run` on the node (default: this one). `profile run` needs only the "
                   "standard library and the slurm_fair package on its path (PYTHONPATH is passed on).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@handle_errors
def submit_cmd(config_path: str | None, account: str, cls: str, types: str | None, seconds: float | None,
               steps: float | None, metric_regex: str | None, partition: str | None, python: str | None,
               command: tuple[str, ...]) -> None:
    """Submit one short one-GPU job per GPU type, each running COMMAND under `slurm-fair profile run`.

    Put COMMAND after --: slurm-fair profile submit --account A --class C -- python train.py --epochs 1.
    COMMAND reaches the node as a JSON argument list in $SLURM_FAIR_PROFILE (never as a shell string).
    The command's throughput is measured from --metric-regex, else its own `slurm-fair profile report` /
    slurm_fair.report() calls, else --steps over its run time. Compute nodes need slurm_fair importable by the
    Python that runs there (--python).
    """
    if seconds is not None and steps is not None:
        raise InputError("--seconds", seconds, "give --seconds or --steps, not both")
    for name, v in (("--seconds", seconds), ("--steps", steps)):
        if v is not None and not v > 0:
            raise InputError(name, v, "must be > 0")
    if metric_regex is not None:
        import re

        try:
            re.compile(metric_regex)
        except re.error as e:
            raise InputError("--metric-regex", metric_regex, f"not a regular expression: {e}") from None
    argv = list(command)
    if not argv:
        raise InputError("COMMAND", "", "give the command after --")
    cfg = config_mod.load(config_path)
    snap = connect(backend=cfg.cluster.backend, timeout=cfg.cluster.timeout).snapshot()
    cluster_types = [t for t, u in snap.gpu_types().items() if u.total - u.unusable > 0]
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else cluster_types
    for t in wanted:
        if t not in cluster_types:
            raise InputError("--types", t, f"not a usable GPU type of the cluster (it has: {', '.join(cluster_types)})")
    run_seconds = seconds if seconds is not None else (None if steps is not None else agent.DEFAULT_SECONDS)
    env = dict(os.environ)
    env[agent.ENV] = agent.job_settings(argv, run_seconds, steps, metric_regex)
    for t in wanted:
        sb = agent.sbatch_argv(account, cls, t, seconds=run_seconds, partition=partition)
        try:
            r = subprocess.run(sb, input=agent.batch_script(python or sys.executable), env=env, capture_output=True, text=True,
                               timeout=cfg.cluster.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmFairError(f"sbatch for {t}: {e}") from None
        if r.returncode != 0:
            raise SlurmFairError(f"sbatch for {t} exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
        click.echo(f"{t}: job {r.stdout.strip().split(';')[0]}")


def _profile_jobs(timeout: float) -> list[dict]:
    """Profiling jobs Slurm still knows (running, pending, or ended within MinJobAge), with their reports."""
    # any job's name or comment may hold bytes that are not UTF-8: they become U+FFFD, never a traceback
    r = subprocess.run(["squeue", "--states=all", "-h", "-o", "%i|%T|%a|%j|%b|%M|%k"], capture_output=True,
                       text=True, encoding="utf-8", errors="replace", timeout=timeout)
    if r.returncode != 0:
        raise SlurmFairError(f"squeue exited {r.returncode}: {r.stderr.strip()}")
    return parse_profile_jobs(r.stdout)


def parse_profile_jobs(text: str) -> list[dict]:
    """The profiling jobs (``fair:profile`` in the comment) of squeue's ``%i|%T|%a|%j|%b|%M|%k`` lines (pure).
    A name or comment may hold ``|`` or a line break: a line whose job id is not ASCII digits is skipped."""
    out = []
    for line in text.split("\n"):
        parts = line.split("|", 6)
        if len(parts) < 7:
            continue
        jid, state, account, name, gres, elapsed, comment = parts
        if not (jid.isascii() and jid.isdigit()):  # a line of a name or comment holding a line break
            continue
        tok = client.parse_tokens(comment)
        if "profile" not in tok:
            continue
        cls = next((t.split("=", 1)[1] for t in comment.split() if t.startswith("class=")), "")
        out.append({"job_id": int(jid), "state": state, "account": account, "class": cls, "name": name,
                    "gres": gres, "elapsed": elapsed, "throughput": tok.get("tput"), "reports": tok.get("n"),
                    "nvml": tok.get("gpu")})
    return sorted(out, key=lambda j: j["job_id"])


@profile_group.command("status")
@config_option
@json_option
@handle_errors
def status_cmd(config_path: str | None, as_json: bool) -> None:
    """What profiling jobs are running and what came back (from Slurm; with the daemon's database, readable
    by its administrators, also the reports the daemon took and the conflicts it sees)."""
    from ..store import as_row

    cfg = config_mod.load(config_path)
    jobs = _profile_jobs(cfg.cluster.timeout)
    taken: list[ProfileReport] = []
    conflicts: list[dict] = []
    db_note = ""
    try:
        from ..profiling.core import find_conflicts
        from ..store import Store

        if not cfg.database_path.exists():
            raise OSError("no database yet")
        with Store(cfg.database_path, read_only=True) as store:
            taken = store.profile_reports(limit=50)
            conflicts = find_conflicts(store.profile_values(), cfg.profiling.conflict_margin)
    except Exception as e:  # noqa: BLE001 - e.g. users cannot read the daemon's database
        db_note = f"database {cfg.database_path}: {e}"
    if as_json:
        click.echo(json.dumps({"jobs": jobs, "reports": [as_row(r) for r in taken], "profile_conflicts": conflicts,
                               "database": db_note or "ok"}, indent=2))
        return
    if jobs:
        click.echo(render(["JOB", "STATE", "ACCOUNT", "CLASS", "GRES", "ELAPSED", "REPORTED", "N", "NVML"],
                          [[j["job_id"], j["state"], j["account"], printable(j["class"], 40), j["gres"], j["elapsed"],
                            j["throughput"] or "-", j["reports"] or "-", j["nvml"] or "-"] for j in jobs]))
    else:
        click.echo("no profiling jobs known to Slurm (ended ones are forgotten after MinJobAge)")
    if taken:
        click.echo("\nreports taken by the daemon (newest first):")
        click.echo(render(["JOB", "N", "ACCOUNT", "CLASS", "GPU_TYPE", "THROUGHPUT", "SOURCE", "STATUS", "WHEN"],
                          [[r.job_id, r.n, r.account, r.cls, r.gpu_type or "-",
                            "-" if r.throughput is None else f"{r.throughput:.6g}", r.source or "-",
                            r.status + (f": {r.message}" if r.message else ""),
                            time.strftime("%H:%M:%S", time.localtime(r.time))] for r in taken]))
    for c in conflicts:
        click.echo(f"conflict: {printable(c['account'])} {printable(c['class'])} on {printable(c['gpu_type'])}: "
                   "reported speedup "
                   f"{c['reported_speedup']:.3g}x over {c['reference']}, measured {c['measured_speedup']:.3g}x "
                   f"({c['samples']} sample(s))")
    if db_note:
        click.echo(f"({printable(db_note, 500)})")


_FORWARD = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@profile_group.command("run", context_settings=_FORWARD, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(args: Any) -> None:
    """Inside a profiling job: run the command, measure, report (see --help)."""
    raise SystemExit(agent.run_main(list(args)))


@profile_group.command("report", context_settings=_FORWARD, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def report_cmd(args: Any) -> None:
    """Inside a job: report its throughput, --steps N --seconds S or --throughput X (see --help)."""
    raise SystemExit(client.main(list(args)))


def register(group: click.Group) -> None:
    """Add the ``profiles`` and ``profile`` command groups to ``group``."""
    group.add_command(profiles_group)
    group.add_command(profile_group)
