"""The shipped Gavel profiles: one source of truth, packaged, loadable, faithful to Gavel's data."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from slurm_fair.profiling import shipped as profiles
from slurm_fair.store import Store
from slurm_fair.profiling.core import effective

REPO = Path(__file__).resolve().parents[2]
GAVEL_JSON = Path("/work/shared/data/gavel/physical_cluster_throughputs.json")


def test_the_tables_are_kept_once_in_the_package():
    assert not list((REPO / "profiles").glob("*.csv"))  # profiles/ holds the generators, not copies
    assert profiles.shipped_csv() == (REPO / "slurm_fair" / "profiling" / "data" / "gavel-physical.csv").read_text()


def test_load_shipped_shape():
    rows = profiles.load_shipped()
    assert len(rows) == 77
    assert {r["gpu_type"] for r in rows} == {"k80", "p100", "v100"}  # no invented a100 numbers
    assert {r["account"] for r in rows} == {""}
    classes = {r["class"] for r in rows}
    assert len(classes) == 26
    assert {"a3c", "cyclegan", "resnet50-bs64", "transformer-bs32", "lm-bs10", "recommendation-bs512"} <= classes
    assert all(re.fullmatch(r"[a-z0-9]+(-bs\d+)?", c) for c in classes)
    assert all(r["throughput"] > 0 for r in rows)
    by = {(r["class"], r["gpu_type"]): r["throughput"] for r in rows}
    assert ("resnet50-bs128", "k80") not in by  # does not fit on a K80: left out, not 0
    assert by[("resnet50-bs64", "v100")] > by[("resnet50-bs64", "k80")]


def test_shipped_csv_imports_into_the_store():
    s = Store(":memory:")
    assert s.import_csv(profiles.shipped_csv(), source="shipped") == 77
    def key(r):
        return r["account"], r["class"], r["gpu_type"]

    assert sorted(profiles.parse(s.export_csv(effective(s.profile_values()))), key=key) == sorted(profiles.load_shipped(), key=key)


def _generator():
    spec = importlib.util.spec_from_file_location("make_gavel_profiles", REPO / "profiles" / "make_gavel_profiles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_class_names():
    assert profiles.class_name("ResNet-50 (batch size 64)") == "resnet50-bs64"
    assert profiles.class_name("CycleGAN") == "cyclegan"
    assert profiles.class_name("Recommendation (batch size 8192)") == "recommendation-bs8192"
    assert profiles.class_name(" (batch size 8)") == ""  # nothing to name: callers refuse it
    assert _generator().class_name is profiles.class_name  # one naming rule, shared by the generator script


@pytest.mark.skipif(not GAVEL_JSON.exists(), reason=f"Gavel source data not present at {GAVEL_JSON}")
def test_csv_is_regenerated_exactly_from_gavel_data():
    gen = _generator()
    assert gen.render(json.loads(GAVEL_JSON.read_text())) == profiles.shipped_csv()
    iso = GAVEL_JSON.with_name("physical_cluster_throughputs_isolated.csv").read_text().splitlines()
    # cross-check against Gavel's rounded CSV export of the same numbers
    by = {(r["class"], r["gpu_type"]): r["throughput"] for r in profiles.load_shipped()}
    header = iso[0].split(",")
    for line in iso[1:]:
        cells = dict(zip(header, line.rsplit(",", len(header) - 1)))
        if cells["scale_factor"] != "1":
            continue
        for gpu in ("k80", "p100", "v100"):
            key = (profiles.class_name(cells["job_type"]), gpu)
            if float(cells[gpu]) == 0:
                assert key not in by
            else:
                assert by[key] == pytest.approx(float(cells[gpu]), rel=1e-5)
