"""``slurm-fair solve``: compute one policy's allocation for a problem file and print it (no cluster needed)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from ..catalog import CHECK_BUDGET_S, POLICIES, PROBE_WORK
from ..errors import InputError, SlurmFairError
from .common import decode_utf8, fail, json_option
from .table import render

if TYPE_CHECKING:  # the solver libraries are imported by the commands that solve only
    from .. import fairness
    from ..model import Allocation

_PROPS = ("sharing_incentive", "envy_free", "pareto_efficient", "equal_throughput", "strategy_proof_probe", "adjacent_types", "capacity", "demand")


def _read_problem(path: str) -> Any:
    where = "<stdin>" if path == "-" else path
    try:
        with click.open_file(path, "rb") as fh:  # "-" = standard input
            data = fh.read()
    except OSError as e:
        raise InputError("--input", path, f"cannot read file: {e.strerror or e}") from None
    text = decode_utf8(data, where)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError("--input", f"{where} line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}") from None
    except RecursionError:
        raise InputError("--input", where, "invalid JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal longer than Python's digit limit
        raise InputError("--input", where, f"invalid JSON: {e}") from None


def _num(v: float, digits: int = 3) -> str:
    s = f"{v:.{digits}f}"
    return "0" if s in (f"{0:.{digits}f}", f"-{0:.{digits}f}") else s


def _allocation_table(alloc: Allocation) -> str:
    vu = alloc.vu
    types = list(vu.gpu_types)
    multi = any(len(t.classes) > 1 for t in alloc.problem.tenants)
    u = alloc.user_throughput()
    per_tenant = alloc.per_tenant()
    thr = alloc.tenant_throughput()
    header = ["tenant"] + (["class"] if multi else []) + types + ["GPUs", "throughput"]
    rows: list[list[str]] = []
    for t in alloc.problem.tenants:
        g = per_tenant[t.name]
        rows.append([t.name] + (["(all)" if len(t.classes) > 1 else t.classes[0].name] if multi else [])
                    + [_num(g[x]) for x in types] + [_num(sum(g.values())), _num(thr[t.name])])
        if multi and len(t.classes) > 1:
            for i in range(vu.n):
                if vu.tenant[i] == t.name:
                    rows.append(["", vu.cls[i]] + [_num(alloc.x[i, j]) for j in range(len(types))]
                                + [_num(float(alloc.x[i].sum())), _num(float(u[i]))])
    col = alloc.x.sum(axis=0)
    rows.append(["total"] + ([""] if multi else []) + [_num(float(c)) for c in col]
                + [_num(float(col.sum())), _num(alloc.total_throughput())])
    rows.append(["capacity"] + ([""] if multi else []) + [str(alloc.problem.gpu_types[x]) for x in types]
                + [str(sum(alloc.problem.gpu_types.values())), ""])
    return render(header, rows)


def payload(alloc: Allocation, props: dict[str, fairness.PropertyResult] | None,
            timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``solve --json`` prints: the allocation, and with ``--check`` the properties and their details, and
    ``check``: the checks' seconds, the probe's time budget and whether the probe finished (:func:`run_checks`)."""
    out = alloc.as_dict()
    if props is not None:
        out["properties"] = {k: props[k].value for k in _PROPS}
        out["property_details"] = {k: props[k].as_dict() for k in _PROPS}
        if timing is not None:
            out["check"] = timing
    return out


def run_checks(alloc: Allocation, solve: Any, sample: int | None, budget_s: float
               ) -> tuple[dict[str, fairness.PropertyResult], dict[str, Any]]:
    """``fairness.check`` with the probe bounded by ``budget_s`` seconds; also the timing that ``payload`` and
    :func:`timing_line` show: {"seconds", "budget_s", "probe_finished"}."""
    import time

    from .. import fairness
    from ..fairness.probe import STOPPED

    t0 = time.monotonic()
    props = fairness.check(alloc, solve=solve, sample=sample, budget_s=budget_s)
    probe = props["strategy_proof_probe"]
    return props, {"seconds": round(time.monotonic() - t0, 3), "budget_s": budget_s,
                   "probe_finished": STOPPED not in probe.detail}


def timing_line(timing: dict[str, Any]) -> str:
    """The checks' time against the probe's budget, and whether the probe finished (said, not hidden)."""
    state = "finished" if timing["probe_finished"] else "NOT finished: stopped by the time budget (detail above)"
    return (f"checks: {timing['seconds']:.1f} s; strategy-proofness probe budget {timing['budget_s']:g} s, "
            f"probe {state}")


def _yes_no(v: bool | None) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[v]


def _check_table(props: dict[str, fairness.PropertyResult]) -> str:
    return render(["property", "holds", "detail"], [[k, _yes_no(props[k].value), props[k].detail] for k in _PROPS], right=())


@click.command("solve")
@click.option(
    "--policy",
    "-p",
    "policy_name",
    default="oef-coop",
    show_default=True,
    metavar="NAME",
    help="Allocation policy: " + ", ".join(POLICIES) + ".",
)
@click.option(
    "--input",
    "-i",
    "input_path",
    required=True,
    metavar="FILE",
    help="Problem JSON: {\"gpu_types\": {type: count}, \"tenants\": [{\"name\", \"weight\", \"classes\": "
    "[{\"name\", \"throughput\": {type: value}, \"demand\", \"type_demand\": {type: GPUs}}]}]}; demand = most "
    "GPUs in all, type_demand = most GPUs per type (a type left out = 0). '-' reads standard input.",
)
@json_option(help="Print JSON for machines instead of tables.")
@click.option("--solver", default=None, metavar="NAME", help="LP solver for the policy (default: the policy's own choice).")
@click.option(
    "--check",
    "do_check",
    is_flag=True,
    help="Also check the fairness properties (sharing incentive, envy-freeness, Pareto-efficiency (one LP; on "
    "large problems a cheap certificate of an improvement first), equal throughput, adjacent GPU types, demand and "
    "per-type caps, and a strategy-proofness probe that re-solves with false reports: fast types inflated (Thm "
    "5.4's lie model) and the slowest type over-reported (sandbagging the fast ones); oef-noncoop is "
    "strategy-proof against the first only). When caps bind, the fairness properties are checked among the "
    "uncapped classes.",
)
@click.option("--check-sample", "check_sample", type=click.IntRange(min=0), default=None, metavar="N",
              help="With --check: at most N false reports (each one re-solve) for the strategy-proofness probe "
              f"(default max(2, {PROBE_WORK} / classes): every lie on a small problem, 2 on a large one; "
              "classes drawn with a fixed seed, two lies each; 0 = skip the probe).")
@click.option("--check-budget", "check_budget", type=click.FloatRange(min=0.1), default=CHECK_BUDGET_S,
              show_default=True, metavar="SECONDS",
              help="With --check: seconds the strategy-proofness probe may take; it stops before a re-solve that "
              "would pass them and says so (the other checks are one LP or less).")
def solve_cmd(policy_name: str, input_path: str, as_json: bool, solver: str | None, do_check: bool,
              check_sample: int | None, check_budget: float) -> None:
    """Compute the fractional GPU allocation of one policy for a problem file.

    Throughput is normalized per job class to its slowest usable GPU type ("equivalent slowest GPUs", OEF
    §2.3). Example (the OEF paper's §3.1 example, cooperative OEF gives [[1, 0.25], [0, 0.75]]):

        slurm-fair solve --policy oef-coop --input etc/examples/paper-3.1.json --check
    """
    if check_sample is not None and not do_check:
        raise click.UsageError("--check-sample needs --check")
    if check_budget != CHECK_BUDGET_S and not do_check:
        raise click.UsageError("--check-budget needs --check")
    from .. import policies  # the solver libraries: imported by the commands that solve only
    from ..model import problem_from_dict

    try:
        problem = problem_from_dict(_read_problem(input_path))
        try:
            policy = policies.get(policy_name)
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("slurm_fair.policies"):
                raise
            raise InputError("--policy", policy_name, "policy is not available in this installation") from None
        alloc = policy(problem, solver=solver)
        props, timing = run_checks(alloc, lambda p: policy(p, solver=solver), check_sample, check_budget) \
            if do_check else (None, None)
    except SlurmFairError as e:
        fail(e)

    if as_json:
        click.echo(json.dumps(payload(alloc, props, timing), indent=2))
        return
    solver_txt = f"   solver: {alloc.solver}" if alloc.solver else ""
    click.echo(f"policy: {alloc.policy}{solver_txt}   solve time: {alloc.solve_seconds:.3f} s")
    click.echo()
    click.echo(_allocation_table(alloc))
    for note in alloc.notes:
        click.echo(f"note: {note}")
    if props is not None:
        click.echo()
        click.echo(_check_table(props))
        click.echo(timing_line(timing))


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(solve_cmd)
