"""The profiling agent's NVML path on a real NVIDIA GPU.

Runs only where NVML finds a device (a GPU machine: ``pytest tests/gpu``); elsewhere, CI included, every test is
skipped with NVML's own reason. Slurm does not run on that machine, so the job's comment lives in a recording
``scontrol`` (``show job`` / ``update JobId=… Comment=…`` on a file): what is checked is the agent's side, a real
GPU workload timed and the device read through NVML, and the token the daemon's harvest then maps to a GRES type.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import textwrap

import pytest

from slurm_fair.profiling import shipped as profiles
from slurm_fair.profiling import agent, client

DEVICES, WHY = agent.read_nvml()
pytestmark = pytest.mark.skipif(not DEVICES, reason=WHY or "NVML found no GPU")

WORKLOAD = textwrap.dedent("""\
    import sys, time
    try:
        import torch
        assert torch.cuda.is_available()
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        def step():
            (a @ a).sum().item()
    except Exception:
        import cupy
        a = cupy.random.rand(4096, 4096).astype(cupy.float16)
        def step():
            float((a @ a).sum())
    start, n = time.monotonic(), 0
    while True:
        step(); n += 1
        if n % 500 == 0:
            print(f"step {n} tput={n / (time.monotonic() - start):.3f}/s", flush=True)
    """)

SCONTROL = textwrap.dedent("""\
    #!{python}
    import sys
    state = {state!r}
    args = sys.argv[1:]
    if args[:2] == ["show", "job"]:
        comment = open(state).read() if __import__("os").path.exists(state) else "(null)"
        print(f"JobId={{args[2]}} JobName=profile-resnet50\\n   Comment={{comment}} Account=acct_a")
    elif args[:1] == ["update"] and args[2].startswith("Comment="):
        open(state, "w").write(args[2][len("Comment="):])
    else:
        sys.exit(2)
    """)


def test_nvml_names_the_gpu_and_the_shipped_map_knows_it():
    d = DEVICES[0]
    assert d["name"] and d["memory_total_mib"] > 1024, d
    assert d["utilization_gpu_pct"] is None or 0 <= d["utilization_gpu_pct"] <= 100
    gres = profiles.gpu_type_of_device(d["name"].replace(" ", "_"), profiles.nvml_map())
    print(f"NVML: {d['name']!r}, {d['memory_total_mib']} MiB -> GRES type {gres!r}")
    assert gres, f"{d['name']!r} is not in the shipped NVML map (slurm_fair/profiling/data/nvml-gpu-types.csv)"


def test_profile_run_times_a_real_gpu_workload_and_reports_it_with_the_device(tmp_path, monkeypatch, capsys):
    work = tmp_path / "workload.py"
    work.write_text(WORKLOAD)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    sc = bindir / "scontrol"
    sc.write_text(SCONTROL.format(python=sys.executable, state=str(tmp_path / "comment")))
    sc.chmod(sc.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "comment").write_text(f"class=resnet50 {client.PROFILE_TOKEN}")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv(agent.ENV, raising=False)
    rc = agent.run_main(["--seconds", "20", "--metric-regex", r"tput=([0-9.]+)/s", "--",
                         sys.executable, str(work)])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert f"GPU 0: {DEVICES[0]['name']}" in out
    m = re.search(r"reported ([0-9.e+]+) steps/s \(metric regex", out)
    assert m and float(m.group(1)) > 1.0, out  # a 4096² fp16 product takes well under a second on any such GPU
    tokens = client.parse_tokens((tmp_path / "comment").read_text())
    assert float(tokens["tput"]) == pytest.approx(float(m.group(1)), rel=1e-3), tokens
    gres = profiles.gpu_type_of_device(tokens.get("gpu"), profiles.nvml_map())
    assert gres and gres == profiles.gpu_type_of_device(DEVICES[0]["name"].replace(" ", "_"), profiles.nvml_map())
    # n counts the job's reports: interim ones (every agent.UPDATE_EVERY s while it runs) and the final one
    assert "profile" in tokens and int(tokens["n"]) >= 1
