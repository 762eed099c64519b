#!/usr/bin/env python3
"""What job_submit.lua costs slurmctld per untyped GPU submission, offline with lua5.1 (issue 29 item 3).

Usage: python3 benchmarks/submit_latency.py [--script PATH] [--compare PATH] [--cached N] [--cold N]

For 300 and 1 000 accounts x 1, 5 and 20 job classes, the daemon's own writer (daemon/publish.py) renders a
type map of that size (one line per account with three types, rooms and blocks, its ``#@untyped`` room, one
class line per account and class, a partition line, ``#@free``, ``#@expires``). The script is loaded as
slurmctld's Lua state keeps it (once) and submits untyped ``--gres=gpu:1`` jobs of rotating accounts and classes
to the default partition:

* **cold**: the parsed map is dropped before every submission (``SF.cache = {}``), i.e. every submission reads
  and parses the whole map — what a script without the cache did on every submission;
* **cached**: the map is unchanged between submissions (as between two publications), so a submission reads
  the map's first line and its size only.

Times are CPU milliseconds per submission (``os.clock``, user + system: the file reads are system time) of the
lua5.1 process. ``--compare PATH`` also times another script (e.g. the one before issue 29:
``git show 2e57759:slurm_fair/share/job_submit.lua > /tmp/old.lua``) the same way, "cached" meaning the same
unchanged map (that script has no cache: it parses on every submission either way; timed --cold times).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.daemon import plan as P  # noqa: E402
from slurm_fair.daemon import publish  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TYPES = ("a100", "v100", "k80")
SIZES = [(300, 1), (300, 5), (300, 20), (1000, 1), (1000, 5), (1000, 20)]


def build_map(n_accounts: int, n_classes: int) -> str:
    """A map the size of a site with these many accounts and classes, written by the daemon's renderer."""
    pool = {"a100": 40, "v100": 60, "k80": 100}
    targets: dict[str, P.Target] = {}
    for i in range(n_accounts):
        a = f"acct{i:04d}"
        order = TYPES[i % 3:] + TYPES[:i % 3]
        targets[a] = P.Target(tuple((g, 2 + (i + k) % 5) for k, g in enumerate(order)),
                              "room: a100 2 (free), v100 3 (guaranteed), k80 4 (free)",
                              {order[0]: 4}, (0, 0, 1), untyped=2, pool=pool)
        for c in range(n_classes):
            cls_order = TYPES[c % 3:] + TYPES[:c % 3]
            targets[f"{a}/cls{c}"] = P.Target(tuple((g, 0) for g in cls_order), "class order",
                                              slow=frozenset({cls_order[-1]}) if c % 4 == 0 else frozenset())
    targets["*"] = P.Target((("k80", 8), ("v100", 4)), "free GPUs no waiting account's guarantee holds",
                            {"k80": 4, "v100": 4}, pool=pool)
    return publish.render_map(targets, partitions=(P.PartitionTypes("gpu", TYPES),), map_id="bench-1",
                              taken_at=1_000_000_000, expires=4_000_000_000)


DRIVER = r"""
slurm = { SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,
	log_user = function() end, log_debug = function() end }
local script, map, accounts, classes, cold_n, cached_n = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]),
	tonumber(arg[5]), tonumber(arg[6])
local sf = dofile(script)
sf.map_file = map
local parts = { gpu = { flag_default = 1 } }
local typed = 0
local function run(n, cold)
	local t0 = os.clock()
	for i = 1, n do
		if cold then
			sf.cache = {}
		end
		local job = { account = string.format("acct%04d", (i * 7) % accounts), tres_per_node = "gres:gpu:1",
			comment = "class=cls" .. (i % classes) }
		assert(sf.job_submit(job, parts, 1000) == slurm.SUCCESS)
		if job.tres_per_node ~= "gres:gpu:1" or job.comment:find("fair:flex", 1, true) then
			typed = typed + 1
		end
	end
	return (os.clock() - t0) / n * 1000
end
run(1, false) -- the first parse
local cold = run(cold_n, true)
local cached = run(cached_n, false)
print(string.format("%.4f %.4f %d", cold, cached, typed))
"""


def measure(script: Path, map_path: Path, accounts: int, classes: int, cold_n: int,
            cached_n: int) -> tuple[float, float, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(DRIVER)
    try:
        r = subprocess.run(["lua5.1", f.name, str(script), str(map_path), str(accounts), str(classes), str(cold_n),
                            str(cached_n)], capture_output=True, text=True, timeout=600)
    finally:
        Path(f.name).unlink()
    if r.returncode != 0:
        raise SystemExit(f"lua5.1 failed: {r.stderr.strip()}")
    cold, cached, typed = r.stdout.split()
    return float(cold), float(cached), int(typed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", default=str(REPO / "etc" / "job_submit.lua"))
    ap.add_argument("--compare", help="another job_submit.lua to time the same way (e.g. an older version)")
    ap.add_argument("--cached", type=int, default=5000, help="submissions timed with an unchanged map")
    ap.add_argument("--cold", type=int, default=20, help="submissions timed with the map parsed each time")
    args = ap.parse_args()
    if shutil.which("lua5.1") is None:
        raise SystemExit("lua5.1 not installed (apt-get install lua5.1)")
    scripts = [("this", Path(args.script))] + ([("compare", Path(args.compare))] if args.compare else [])
    print(f"{'accounts':>8} {'classes':>7} {'map KiB':>8} " + " ".join(
        f"{name + ' cold ms':>16} {name + ' cached ms':>18}" for name, _ in scripts))
    with tempfile.TemporaryDirectory() as d:
        for accounts, classes in SIZES:
            text = build_map(accounts, classes)
            path = Path(d) / "gpu_type_map.txt"
            path.write_text(text)
            row = f"{accounts:>8} {classes:>7} {len(text.encode()) / 1024:>8.0f} "
            for name, script in scripts:
                # the compared script parses on every submission either way: as many as cold, not hours
                cold, cached, typed = measure(script, path, accounts, classes, args.cold,
                                              args.cached if name == "this" else args.cold)
                if typed == 0:
                    raise SystemExit(f"{script}: no job was typed: the benchmark measures nothing")
                row += f"{cold:>16.3f} {cached:>18.4f} "
            print(row.rstrip(), flush=True)


if __name__ == "__main__":
    main()
