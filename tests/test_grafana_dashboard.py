"""contrib/grafana/slurm-fair.json: a Grafana dashboard whose every query names only metrics the daemon's
exporter exports (daemon/metrics.py), and every exported metric on some panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

from slurm_fair.daemon import metrics as M

DASHBOARD = Path(__file__).resolve().parent.parent / "contrib" / "grafana" / "slurm-fair.json"


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out += p.get("panels", [])  # collapsed rows
    return out


def test_grafana_dashboard_asks_only_for_exported_metrics():
    dash = json.loads(DASHBOARD.read_text())
    exported = {f.name for f in M.families(M.Inputs())}
    assert any(v.get("type") == "datasource" and v.get("query") == "prometheus"
               for v in dash["templating"]["list"])
    exprs = []
    for p in _panels(dash):
        if p.get("type") == "row":
            continue
        assert p.get("targets"), f"panel {p.get('title')!r} has no query"
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p.get("title")
            exprs.append(t["expr"])
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            exprs.append(v["query"]["query"] if isinstance(v["query"], dict) else v["query"])
    assert exprs
    named = set()
    for e in exprs:
        names = set(re.findall(r"\bslurm_fair_[a-z_]+\b", e))
        assert names, f"{e!r} names no slurm-fair metric"
        named |= names
    assert named <= exported, f"not exported: {sorted(named - exported)}"
    assert named == exported, f"exported but on no panel: {sorted(exported - named)}"


def test_realized_fairness_has_its_panels_and_their_window_is_named():
    """Issue 39: realized fairness per account on its own row; every realized series' help names the window the
    daemon computes it over (the last 24 h), and the panels' titles say the same."""
    dash = json.loads(DASHBOARD.read_text())
    realized = [f for f in M.families(M.Inputs()) if f.name.startswith("slurm_fair_realized_")]
    assert {f.name for f in realized} >= {"slurm_fair_realized_share_ratio", "slurm_fair_realized_envy_share",
                                          "slurm_fair_realized_backlogged_seconds"}
    for f in realized:
        if f.labels == ("account",):
            assert "over the last 24 h" in f.help, f
    panels = {p["title"]: p for p in _panels(dash)}
    ratio = panels["Realized share ratio (last 24 h)"]
    assert any(t["expr"].startswith("slurm_fair_realized_share_ratio{") for t in ratio["targets"])
    assert all("(last 24 h" in p["title"] for p in _panels(dash)
               if any("slurm_fair_realized_" in t["expr"] and "compute" not in t["expr"] for t in p.get("targets", [])))
