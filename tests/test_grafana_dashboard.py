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
