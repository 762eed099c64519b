"""A package an admin installs: the wheel built from this checkout, installed into a clean venv (the project's
dependencies taken from the test's own environment, the checkout nowhere on the path), carries the site files:
``slurm-fair hooks install`` works from it, ``slurm-fair files`` lists job_submit.lua, the hook shim, the systemd
unit and the default config inside the installed package, and ``slurm-fair preflight`` passes on the testbed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from slurm_fair import config as config_mod

from .conftest import REPO_ROOT


def test_the_wheel_installs_and_its_hooks_and_preflight_work(testbed, tmp_path):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps", "-q", "-w", str(dist)],
                   check=True, capture_output=True, text=True, timeout=300, env=clean)
    (wheel,) = dist.glob("slurm_fair-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=clean)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--no-deps", "-q", str(wheel)], check=True,
                   capture_output=True, text=True, timeout=300, env=clean)
    env = {k: v for k, v in testbed.env.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]  # the dependencies, not the checkout

    def sf(*args):
        r = subprocess.run([str(venv / "bin" / "slurm-fair"), *args], env=env, capture_output=True, text=True,
                           timeout=180, cwd=str(tmp_path))
        return r

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import slurm_fair; print(slurm_fair.__file__)"],
                           env=env, capture_output=True, text=True, timeout=60, cwd=str(tmp_path)).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed package, not the checkout
    files = sf("files").stdout.split()
    assert {Path(f).name for f in files} >= {"job_submit.lua", "slurm-fair-hook", "slurm-fair.service",
                                              "slurm-fair.toml"}
    assert all(f.startswith(str(venv)) for f in files), files
    r = sf("hooks", "install", str(tmp_path / "hooks"), "--spool", str(tmp_path / "spool"))
    assert r.returncode == 0, r.stderr
    assert os.access(tmp_path / "hooks" / "slurm-fair-hook", os.X_OK) and (tmp_path / "hooks" / "jobrecord.py").exists()
    assert "PrologSlurmctld=" in r.stdout
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"))
    cfg = tmp_path / "slurm-fair.toml"
    cfg.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    r = sf("preflight", "--json", "--config", str(cfg))
    assert r.returncode == 0 and json.loads(r.stdout)["ok"], r.stdout + r.stderr
