"""``slurm-fair compare``: every policy on one problem file, side by side (allocation, throughput, properties).

Time: the strategy-proofness probes of all policies share one budget (``--check-budget``, issue 41): each
policy's probe gets what is left of it divided by the policies still to run, stops before a re-solve that would
pass its share and says so; the output ends with the checks' time and the probes that did not finish. The
policies' own solves are not cut short (an allocation is all or nothing)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

import time

from ..catalog import COMPARE_BUDGET_S, POLICIES
from ..errors import SlurmFairError
from .common import fail, json_option
from .solve import _PROPS, _num, _read_problem, _yes_no, payload, run_checks
from .table import render

if TYPE_CHECKING:  # the solver libraries are imported by the commands that solve only
    from ..model import Allocation

REFERENCE = "max-throughput"


def _run(name: str, problem: Any, solver: str | None, sample: int | None, budget_s: float
         ) -> tuple[Allocation | None, dict | None, str | None, dict | None]:
    """One policy's allocation and property checks (the probe within ``budget_s`` seconds) and their timing, or
    the error that stopped it (the others still run)."""
    from .. import policies  # the solver libraries: imported by the commands that solve only

    try:
        policy = policies.get(name)
        alloc = policy(problem, solver=solver)
        props, timing = run_checks(alloc, lambda p: policy(p, solver=solver), sample, budget_s)
    except SlurmFairError as e:
        return None, None, str(e), None
    except ModuleNotFoundError as e:  # a policy module missing from this installation
        return None, None, f"policy is not available in this installation ({e.name})", None
    return alloc, props, None, timing


def run_all(problem: Any, wanted: list[str], solver: str | None, sample: int | None, budget_s: float,
            clock=time.monotonic) -> dict[str, tuple]:
    """:func:`_run` for every policy, the probes sharing ``budget_s``: each gets what is left divided by the
    policies still to run (at least 0.1 s: a probe with less says it did not run)."""
    out = {}
    end = clock() + budget_s
    for i, n in enumerate(wanted):
        share = max(0.1, (end - clock()) / (len(wanted) - i))
        out[n] = _run(n, problem, solver, sample, share)
    return out


def budget_line(results: dict[str, tuple], budget_s: float) -> str:
    """The checks' seconds against the budget, and the probes that did not finish (named, not hidden)."""
    timings = {n: r[3] for n, r in results.items() if r[3] is not None}
    used = sum(t["seconds"] for t in timings.values())
    short = [n for n, t in timings.items() if not t["probe_finished"]]
    tail = ("every probe finished" if not short else
            f"probe NOT finished (stopped by the time budget): {', '.join(short)}")
    return f"checks: {used:.1f} s in all; strategy-proofness probe budget {budget_s:g} s for all policies; {tail}"


def _tables(problem: Any, results: dict[str, tuple[Allocation | None, dict | None, str | None]]) -> str:
    names = [n for n, r in results.items() if r[0] is not None]
    allocs = {n: results[n][0] for n in names}
    types = list(problem.gpu_types)
    tenants = [t.name for t in problem.tenants]
    out = []
    # throughput per tenant (normalized to each class's slowest type), total, share of the max-throughput total
    rows = [[t] + [_num(allocs[n].tenant_throughput()[t]) for n in names] for t in tenants]
    rows.append(["total"] + [_num(allocs[n].total_throughput()) for n in names])
    ref = allocs.get(REFERENCE)
    if ref is not None and ref.total_throughput() > 0:
        rows.append([f"vs {REFERENCE}"] + [f"{allocs[n].total_throughput() / ref.total_throughput():.1%}" for n in names])
    num = range(1, len(names) + 1)
    out.append("Normalized throughput per tenant\n" + render(["tenant", *names], rows, right=num))
    # GPUs per tenant and type
    rows = []
    for t in tenants:
        for j, g in enumerate(types):
            rows.append([t if j == 0 else "", g] + [_num(allocs[n].per_tenant()[t][g]) for n in names])
    out.append("GPUs per tenant and type\n" + render(["tenant", "type", *names], rows))
    # properties
    rows = [[k] + [_yes_no(results[n][1][k].value) for n in names] for k in _PROPS]
    out.append("Properties (fairness checks, as `solve --check`)\n" + render(["property", *names], rows, right=()))
    for n, (_a, _p, err, _t) in results.items():
        if err is not None:
            out.append(f"{n}: error: {err}")
    return "\n\n".join(out)


@click.command("compare")
@click.option("--input", "-i", "input_path", required=True, metavar="FILE",
              help="Problem JSON, as for `slurm-fair solve` ('-' reads standard input).")
@click.option("--policies", "names", default=",".join(POLICIES), show_default=True, metavar="LIST",
              help="Comma-separated policies to compare.")
@click.option("--solver", default=None, metavar="NAME", help="LP solver for every policy (default: each policy's own).")
@click.option("--check-sample", "check_sample", type=click.IntRange(min=0), default=None, metavar="N",
              help="At most N false reports (re-solves) the strategy-proofness probe tries per policy (as `solve "
              "--check-sample`; default: every lie on a small problem, 2 on a large one).")
@click.option("--check-budget", "check_budget", type=click.FloatRange(min=0.1), default=COMPARE_BUDGET_S,
              show_default=True, metavar="SECONDS",
              help="Seconds the strategy-proofness probes of all policies may take together (each gets what is "
              "left divided by the policies still to run); a probe stopped by it says so, and the output ends "
              "with the time used and the probes that did not finish.")
@json_option(help='Print JSON: {"policies": {name: that policy\'s `solve --check --json` output, or {"error": ...}}, '
             '"check_budget_s": seconds}.')
def compare_cmd(input_path: str, names: str, solver: str | None, check_sample: int | None, check_budget: float,
                as_json: bool) -> None:
    """Every policy on one problem, side by side: throughput per tenant, GPUs per tenant and type, the total and
    its share of max-throughput's, and the fairness properties each keeps or breaks. A policy that fails is
    reported and the others still run (exit status 1).

        slurm-fair compare --input etc/examples/paper-2.4.json
    """
    from .. import lp, policies
    from ..model import problem_from_dict

    try:
        problem = problem_from_dict(_read_problem(input_path))
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        for n in wanted:
            policies.get(n)  # an unknown name is a usage error before anything runs
        if solver:
            lp.pick_solver(solver)
    except SlurmFairError as e:
        fail(e)
    results = run_all(problem, wanted, solver, check_sample, check_budget)
    if as_json:
        click.echo(json.dumps({"policies": {n: payload(a, p, t) if a is not None else {"error": err}
                                            for n, (a, p, err, t) in results.items()},
                               "check_budget_s": check_budget}, indent=2))
    else:
        click.echo(_tables(problem, results))
        click.echo()
        click.echo(budget_line(results, check_budget))
    if any(err is not None for _a, _p, err, _t in results.values()):
        raise SystemExit(1)  # shown above; the other policies' results are complete


def register(group: click.Group) -> None:
    group.add_command(compare_cmd)
