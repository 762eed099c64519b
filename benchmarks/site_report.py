"""Markdown tables for ``benchmarks/site_round.py``'s results (pure: a result dict in, text out)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

PHASES = ("observe", "ingest", "harvest", "solve", "plan", "details", "apply limits", "apply SiteFactor", "retype",
          "type map", "preemption", "record")
DAEMONS = ("slurmctld", "slurmdbd", "mariadbd")


def table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _f(x: Any, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _load(t: Sequence[float] | None) -> str:
    return "-" if not t else " / ".join(f"{v:.2f}" for v in t)


def conditions(r: Mapping[str, Any]) -> str:
    sl, st, sb = r["slurm"], r.get("setup", {}), r.get("submit", {})
    a = r["args"]
    rows = [
        ("started", r["started"]),
        ("machine", f"{r['cpus']} CPUs, shared with other work"),
        ("load 1/5/15 min before / after", f"{_load(r.get('load_before'))} / {_load(r.get('load_after'))}"),
        ("Slurm", f"{sl['version']}; MaxJobCount={sl['MaxJobCount']}, MaxArraySize={sl['MaxArraySize']}, "
                  f"MinJobAge={sl['MinJobAge']}; SchedulerParameters={sl['SchedulerParameters']}"),
        ("account tree", f"{st.get('depts')} departments > {st.get('groups')} groups > {st.get('leaves')} leaf "
                         f"accounts, {st.get('user_associations')} user associations; {st.get('sacctmgr_calls')} "
                         f"sacctmgr calls, {_f(st.get('seconds'), 1)} s"),
        ("jobs", f"{sb.get('tasks')} GPU jobs in {sb.get('records')} records (array size {a['array_size']}); types "
                 f"{a['types']} + {a['untyped']:.0%} untyped; 1/2/4 GPUs; Zipf {a['skew']} over accounts"),
        ("submission", f"{_f(sb.get('seconds'), 1)} s with {sb.get('threads')} concurrent sbatch "
                       f"({sb['records'] / sb['seconds']:.0f} records/s)" if sb.get("seconds") else "-"),
        ("policy / period", f"{a['policy'] or 'the default'} / {a['period']:g} s; {a['gap']:g} s between rounds"),
    ]
    sub = (sb.get("window") or {}).get("sdiag", {}).get("types", {}).get("REQUEST_SUBMIT_BATCH_JOB")
    if sub:
        rows.append(("slurmctld time per submission (bulk)", f"{sub[1] / sub[0] / 1000:.1f} ms (sdiag ave_time)"))
    return table(("", "value"), rows)


def rounds(r: Mapping[str, Any]) -> str:
    rr = r.get("rounds", {}).get("rounds", [])
    if not rr:
        return "(no rounds)"
    variants = {x.get("variant", "default") for x in rr}

    def title(x: Mapping[str, Any]) -> str:
        v = x.get("variant", "default")
        first = x is next(y for y in rr if y.get("variant", "default") == v)
        cold = "cold" if x is rr[0] else ("warm store, new limit model" if first else "warm")
        return (f"{v}: " if len(variants) > 1 else "") + f"round {x['round']} ({cold})"

    head = ["", *[title(x) for x in rr]]
    rows: list[list[Any]] = []

    def row(name: str, fn: Any) -> None:
        rows.append([name, *[fn(x) for x in rr]])

    row("status", lambda x: x["status"] + (f" ({x['message'][:60]})" if x["message"] else ""))
    row("**round wall s**", lambda x: f"**{x['seconds']:.2f}**")
    for p in PHASES:
        if any(p in x["phases"] for x in rr):
            row(f"&nbsp;&nbsp;{p} s", lambda x, p=p: _f(x["phases"].get(p)))
    row("&nbsp;&nbsp;other s", lambda x: _f(x["seconds"] - sum(v for k, v in x["phases"].items() if k in PHASES)))
    row("pending / running GPU job records seen", lambda x: f"{x['pending_records']} / {x['running_records']}")
    row("accounts in Slurm / managed", lambda x: f"{x['accounts_seen']} / {x['managed_accounts']}")
    row("limit changes: accounts (keys)", lambda x: f"{x['limit_accounts']} ({x['limit_keys']})")
    row("SiteFactor updates made / deferred / jobs with a factor", lambda x: f"{x['factor_changes']} / "
        f"{x['factors_deferred']} / {x['factors_planned']}")
    kinds = sorted({k for x in rr for k in x["calls"]})
    for k in kinds:
        row(f"`{k}` calls (s)", lambda x, k=k: (f"{x['calls'][k][0]} ({x['calls'][k][1]:.2f})"
                                              + (f", {x['calls'][k][2]} failed" if x["calls"][k][2] else ""))
            if k in x["calls"] else "0")
    row("**Slurm commands per round**", lambda x: f"**{sum(v[0] for v in x['calls'].values())}**")
    types = sorted({t for x in rr for t in x["window"]["sdiag"]["types"]})
    for t in types:
        row(f"slurmctld RPC {t}", lambda x, t=t: (lambda v: f"{v[0]} ({v[1] / 1000:.0f} ms)" if v else "0")(
            x["window"]["sdiag"]["types"].get(t)))
    row("**slurmctld RPCs in the round** (time in slurmctld)",
        lambda x: f"**{x['window']['sdiag']['rpcs']}** ({x['window']['sdiag']['total_us'] / 1000:.0f} ms)")
    idle = r.get("idle")
    for d in DAEMONS:
        def cpu(x: Mapping[str, Any], d: str = d) -> str:
            got = x["window"]["cpu"].get(d)
            if got is None:
                return "-"
            bg = (idle["cpu"].get(d, 0.0) / idle["seconds"] * x["window"]["seconds"]) if idle else None
            return f"{got:.2f}" + (f" (idle: {bg:.2f})" if bg is not None else "")
        row(f"{d} CPU s over the round's {'window'}", cpu)
    row("window s (round + settle)", lambda x: _f(x["window"]["seconds"], 1))
    row("load (1 min) at the end", lambda x: _f(x["window"]["load"]))
    row("daemon peak RSS MiB", lambda x: _f(x["peak_rss_kb"] / 1024, 0))
    row("type map lines (bytes)", lambda x: f"{x['type_map_lines']['lines']} ({x['type_map_lines']['bytes']})"
        if x.get("type_map_lines") else "-")
    row("planned SiteFactors: distinct values / accounts / accounts sharing a band",
        lambda x: (lambda b: f"{b['distinct_values']} / {b['accounts']} / {b['accounts_overlapping']}" if b else "-")(
            x.get("bands_planned")))
    extra = f"\n\nimport of the round code in the child: {r['rounds'].get('import_s', 0):.2f} s"
    return table(head, rows) + extra


def bands(r: Mapping[str, Any]) -> str:
    b = r.get("bands_slurm")
    if not b:
        return ""
    return table(("SiteFactors in Slurm after the last round (sprio)", "value"), [
        ("pending jobs of the benchmark's accounts", b["pending_jobs"]),
        ("with a SiteFactor set", b["with_site_factor"]),
        ("accounts with set factors", b["accounts"]),
        ("distinct SiteFactor values", b["distinct_values"]),
        ("accounts whose band meets another account's", b["accounts_overlapping"]),
        ("range", f"{b['min']} .. {b['max']}"),
        ("account pairs whose order by SiteFactor holds in the jobs' whole priority (sprio %Y)",
         f"{b['order_kept']:.1%}" if b.get("order_kept") is not None else "-"),
    ])


def hooks(r: Mapping[str, Any]) -> str:
    h = r.get("hooks")
    if not h:
        return ""
    n = h["jobs"]
    w, one, idle = h["window"], h["scontrol_show_job"], h["idle"]
    scale = w["seconds"] / idle["seconds"] if idle["seconds"] else 0.0
    rows = []
    for t in sorted(w["sdiag"]["types"]):
        c, us = w["sdiag"]["types"][t]
        bg = idle["sdiag"]["types"].get(t, [0, 0])[0] * scale
        hook = one["sdiag"]["types"].get(t, [0, 0])[0] * 2  # two controller hooks per job
        rows.append((t, f"{(c - bg) / n:.2f}", f"{hook}", f"{us / c / 1000:.2f}" if c else "-"))
    total = (w["sdiag"]["rpcs"] - idle["sdiag"]["rpcs"] * scale) / n
    rows.append(("**all**", f"**{total:.2f}**", f"**{2 * one['sdiag']['rpcs']}**", ""))
    rec = h.get("hook_records")
    return (table(("slurmctld RPC per job (hooks installed)", f"per job ({n} jobs, net of idle)",
                   "of which the two controller hooks' `scontrol show job -d`", "ave ms in slurmctld"), rows)
            + f"\n\nhook records written per job: {rec / n if rec is not None else '-'} "
            f"(2 controller + 2 node hooks; the node hooks call no Slurm command)")


def submissions(r: Mapping[str, Any]) -> str:
    b, a = r.get("probe_before"), r.get("probe_after")
    if not b:
        return ""
    rows = []
    for name, p in (("before the first round (no type map)", b), ("after the last round (map of every account)", a)):
        if p:
            rows.append((name, p["n"], _f(p["sbatch_median_s"] * 1000, 1), _f(p["sbatch_max_s"] * 1000, 1),
                         _f(p["submit_rpc_ave_us"] / 1000 if p["submit_rpc_ave_us"] else None, 2)))
    return table(("held untyped submissions, one at a time", "n", "sbatch median ms", "sbatch max ms",
                  "slurmctld ms per REQUEST_SUBMIT_BATCH_JOB (job_submit.lua included)"), rows)


def idle(r: Mapping[str, Any]) -> str:
    i = r.get("idle")
    if not i:
        return ""
    cpu = ", ".join(f"{d} {i['cpu'].get(d, float('nan')) / i['seconds'] * 100:.0f} %" for d in DAEMONS)
    return (f"idle window ({i['seconds']:.0f} s, no client, all jobs submitted): {i['sdiag']['rpcs']} RPCs; "
            f"CPU {cpu} of one core; load {i['load']:.2f}")


def polls(r: Mapping[str, Any]) -> str:
    """The daemon's polls between rounds, and what rounds + polls cost the controller per daemon.period."""
    pl = r.get("rounds", {}).get("polls") or []
    rr = r.get("rounds", {}).get("rounds") or []
    if not pl:
        return ""
    rows = []
    for i, p in enumerate(pl, 1):
        w = p["window"]
        rows.append((i, _f(p["seconds"]), _f(p["interval"], 1), sum(v[0] for v in p["calls"].values()),
                     w["sdiag"]["rpcs"], f"{w['sdiag']['total_us'] / 1000:.0f}", _f(w["cpu"].get("slurmctld"))))
    text = table(("poll (between rounds)", "wall s", "next poll after s", "Slurm commands", "slurmctld RPCs",
                  "ms in slurmctld", "slurmctld CPU s"), rows)
    period = float(r["args"]["period"])
    warm = rr[-1] if rr else None
    if warm is not None:
        n = len(pl)
        interval = sum(p["interval"] for p in pl) / n
        per = max(period - warm["seconds"], 0.0) / interval
        cpu_p = sum(p["window"]["cpu"].get("slurmctld", 0.0) for p in pl) / n
        rpc_p = sum(p["window"]["sdiag"]["rpcs"] for p in pl) / n
        cpu_r = warm["window"]["cpu"].get("slurmctld", 0.0)
        idle_w = r.get("idle")
        bg = (idle_w["cpu"].get("slurmctld", 0.0) / idle_w["seconds"] * period) if idle_w else None
        text += (f"\n\nper daemon.period of {period:g} s: one round (the last one: {warm['window']['sdiag']['rpcs']} "
                 f"RPCs, {cpu_r:.2f} s slurmctld CPU) + {per:.0f} polls ({rpc_p * per:.0f} RPCs, "
                 f"{cpu_p * per:.2f} s slurmctld CPU) = {(cpu_r + cpu_p * per) / period:.1%} of one core for "
                 f"slurmctld" + (f"; slurmctld's own background with these jobs: {bg / period:.1%}" if bg else ""))
    return text


def render(r: Mapping[str, Any]) -> str:
    parts = ["## Conditions", conditions(r), "## Rounds", rounds(r), polls(r), idle(r), bands(r), "## Hooks and submission",
             hooks(r), submissions(r)]
    c = r.get("cleanup")
    if c:
        parts.append(f"cleanup: {c['jobs_cancelled']} jobs cancelled, {c['accounts_deleted']} accounts deleted "
                     f"({c['accounts_left']} left), rollback restored {c['rollback_limits']} account(s)' limits, "
                     f"{c['seconds']:.1f} s")
    return "\n\n".join(p for p in parts if p)
