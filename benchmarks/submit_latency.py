#!/usr/bin/env python3
"""What job_submit.lua costs slurmctld per untyped GPU submission, offline with lua5.1 (issue 29 item 3).

Usage: python3 benchmarks/submit_latency.py [--script PATH] [--compare PATH] [--cached N] [--cold N]
       python3 benchmarks/submit_latency.py --testbed N [--compare PATH]   (root, a running testbed's env: see below)

For 300 and 1 000 accounts x 1, 5 and 20 job classes, the daemon's own writer (daemon/type_map_file.py) renders a
type map of that size (one line per account with three types, rooms and blocks, its ``#@untyped`` room, one
class line per account and class, a partition line, ``#@free``, ``#@expires``; its identity the hash of its
content, an index of the accounts' sections). The script is loaded as slurmctld's Lua state keeps it (once) and
submits untyped ``--gres=gpu:1`` jobs of rotating accounts and classes to the default partition:

* **cold** (content changed): the Lua state holds nothing of the map before every submission (``SF.cache = {}``):
  a map with a new identity, as after a change of content; the script reads its head and the account's section
  (a script without the index parsed the whole map);
* **poll**: the same content from a later snapshot (a new first line, the same identity) before every
  submission: the script reads the fresh lines (``#@map``, ``#@expires``, ``#@soon``) only;
* **cached**: the map is unchanged between submissions and every account's section was read once before, so a
  submission reads the map's first line and its size only.

Times are CPU milliseconds per submission (``os.clock``, user + system: the file reads are system time) of the
lua5.1 process. ``--compare PATH`` also times another script (e.g. the one before issue 40's index:
``git show 23e4494~1:slurm_fair/share/job_submit.lua > /tmp/old.lua``) the same way (a script without the index
parses the whole map on a poll too; timed --cold times).

``--testbed N`` measures inside the testbed's slurmctld (``eval "$(contrib/testbed/testbed.sh env)"``, as root,
under the testbed lock; it cancels nothing but its own held jobs): the script is installed next to slurm.conf
with a timer around its map read (:data:`TIMER`, in the installed copy only: ``os.clock`` around
``read_map``, logged to slurmctld.log; tmp + mv, a newer mtime; the testbed's own script and map are put back
afterwards), then N rounds of held untyped ``--gres=gpu:1`` submissions as alice/acct_a: a 1 000 x 20 map of new
content (acct_a one of its accounts), a submission, another one (cached), the same content published again from
a later snapshot (a poll), a submission, the map moved away, a submission (no map); with ``--compare`` N/2 more
rounds of new content with that script. Prints the median sbatch wall milliseconds of each and the median CPU
milliseconds of the map read inside slurmctld (CPU time of the slurmctld process while it read the map).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import time
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.daemon import plan as P  # noqa: E402
from slurm_fair.daemon import type_map_file  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TYPES = ("a100", "v100", "k80")
SIZES = [(300, 1), (300, 5), (300, 20), (1000, 1), (1000, 5), (1000, 20)]


def build_map(n_accounts: int, n_classes: int, taken_at: int = 1_000_000_000, expires: int = 4_000_000_000,
              variant: int = 0, names: tuple[str, ...] = ()) -> str:
    """A map the size of a site with these many accounts and classes, written by the daemon's renderer (its
    identity the hash of its content, as the daemon publishes it); ``variant`` changes one room of the first
    account (another content: another identity); ``names`` replace the first accounts' names."""
    pool = {"a100": 40, "v100": 60, "k80": 100}
    targets: dict[str, P.Target] = {}
    for i in range(n_accounts):
        a = names[i] if i < len(names) else f"acct{i:04d}"
        order = TYPES[i % 3:] + TYPES[:i % 3]
        targets[a] = P.Target(tuple((g, 2 + (i + k) % 5 + (variant if i == 0 else 0)) for k, g in enumerate(order)),
                              "room: a100 2 (free), v100 3 (guaranteed), k80 4 (free)",
                              {order[0]: 4}, (0, 0, 1), untyped=2, pool=pool)
        for c in range(n_classes):
            cls_order = TYPES[c % 3:] + TYPES[:c % 3]
            targets[f"{a}/cls{c}"] = P.Target(tuple((g, 0) for g in cls_order), "class order",
                                              slow=frozenset({cls_order[-1]}) if c % 4 == 0 else frozenset())
    targets["*"] = P.Target((("k80", 8), ("v100", 4)), "free GPUs no waiting account's guarantee holds",
                            {"k80": 4, "v100": 4}, pool=pool)
    return type_map_file.render_map(targets, partitions=(P.PartitionTypes("gpu", TYPES),),
                                    map_id=type_map_file.CONTENT_ID, taken_at=taken_at, expires=expires)


DRIVER = r"""
slurm = { SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,
	log_user = function() end, log_debug = function() end }
local script, map, accounts, classes, cold_n, cached_n = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]),
	tonumber(arg[5]), tonumber(arg[6])
local sf = dofile(script)
sf.map_file = map
local parts = { gpu = { flag_default = 1 } }
local typed = 0
local function run(n, mode)
	local t0 = os.clock()
	for i = 1, n do
		if mode == "cold" then
			sf.cache = {}
		elseif mode == "poll" then
			sf.cache.key = nil -- what a new publication of the same content looks like (another first line)
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
run(1, "cached") -- the first parse
local cold = run(cold_n, "cold")
local poll = run(cold_n, "poll")
run(accounts, "cached") -- every account's section read once (the first job of each account after a change)
local cached = run(cached_n, "cached")
print(string.format("%.4f %.4f %.4f %d", cold, poll, cached, typed))
"""


def measure(script: Path, map_path: Path, accounts: int, classes: int, cold_n: int,
            cached_n: int) -> tuple[float, float, float, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(DRIVER)
    try:
        r = subprocess.run(["lua5.1", f.name, str(script), str(map_path), str(accounts), str(classes), str(cold_n),
                            str(cached_n)], capture_output=True, text=True, timeout=600)
    finally:
        Path(f.name).unlink()
    if r.returncode != 0:
        raise SystemExit(f"lua5.1 failed: {r.stderr.strip()}")
    cold, poll, cached, typed = r.stdout.split()
    return float(cold), float(poll), float(cached), int(typed)


def _install(data: bytes, dest: Path, mtime: float) -> None:
    tmp = dest.parent / f".{dest.name}.bench.tmp"
    tmp.write_bytes(data)
    tmp.chmod(0o644)
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, dest)


def _sbatch_ms(env: dict[str, str], jobdir: str) -> tuple[float, int]:
    argv = ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--hold", "--account=acct_a", "--gres=gpu:1",
            f"--chdir={jobdir}", "--output=/dev/null", "--wrap", "sleep 1"]
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=jobdir)
    ms = (time.perf_counter() - t0) * 1000
    if r.returncode != 0:
        raise SystemExit(f"sbatch failed: {r.stderr.strip()}")
    return ms, int(r.stdout.strip().split(";")[0])


TIMER = """
do -- submit_latency.py --testbed: the CPU time of the map read inside slurmctld, logged per submission
	local sf = slurm_fair_submit
	local real = sf.read_map
	sf.read_map = function(...)
		local t0 = os.clock()
		local a, b, c = real(...)
		slurm.log_info("submit_latency: read_map %.4f ms", (os.clock() - t0) * 1000)
		return a, b, c
	end
end
"""


def _timed(source: bytes) -> bytes:
    """The script with :data:`TIMER` before its last line (``return slurm.SUCCESS``): the installed copy only."""
    text = source.decode()
    at = text.rstrip().rindex("\n") + 1
    return (text[:at] + TIMER + text[at:]).encode()


def _conf(key: str) -> str:
    for line in Path(os.environ["SLURM_CONF"]).read_text().splitlines():
        if line.split("=", 1)[0].strip().lower() == key.lower():
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"no {key} in {os.environ['SLURM_CONF']}")


def testbed(n: int, script: Path, compare: Path | None) -> None:
    """Median sbatch wall time on the running testbed with the 1 000 x 20 map (module docstring)."""
    env = dict(os.environ)
    etc = Path(env["SLURM_CONF"]).parent
    jobdir = env.get("TESTBED_JOBDIR") or str(Path(env["SLURM_FAIR_TESTBED"]) / "jobs")
    dest, map_path, aside = etc / "job_submit.lua", etc / "gpu_type_map.txt", etc / ".gpu_type_map.bench"
    before, before_mtime = dest.read_bytes(), dest.stat().st_mtime
    before_map = map_path.read_bytes() if map_path.is_file() else None
    jobs: list[int] = []
    stamp = max(time.time(), before_mtime) + 1
    variant = iter(range(1, 1_000_000))
    log = Path(_conf("SlurmctldLogFile"))
    seen = [log.stat().st_size]
    cpu: dict[int, list[float]] = {}  # id(list) of the sbatch times -> the map read's CPU ms in slurmctld, per job

    def publish(new_content: bool, taken_at: int) -> None:
        v = next(variant) if new_content else publish.last  # type: ignore[attr-defined]
        publish.last = v  # type: ignore[attr-defined]
        text = build_map(1000, 20, taken_at=taken_at, expires=int(time.time()) + 3600, variant=v, names=("acct_a",))
        _install(text.encode(), map_path, time.time())

    def sbatch(into: list[float]) -> None:
        ms, jid = _sbatch_ms(env, jobdir)
        into.append(ms)
        jobs.append(jid)
        with log.open("rb") as f:
            f.seek(seen[0])
            new = f.read().decode(errors="replace")
            seen[0] = f.tell()
        times = [float(x) for x in re.findall(r"submit_latency: read_map ([0-9.]+) ms", new)]
        if times:
            cpu.setdefault(id(into), []).append(times[-1])

    try:
        _install(_timed(script.read_bytes()), dest, stamp)
        changed, cached, polled, none_ms = [], [], [], []
        for i in range(n):
            publish(True, int(time.time()) - 1)  # new content: a new identity
            sbatch(changed)
            sbatch(cached)
            publish(False, int(time.time()))  # a poll: the same content from a later snapshot
            sbatch(polled)
            os.replace(map_path, aside)
            sbatch(none_ms)
            os.replace(aside, map_path)
        rows = [("no map", none_ms), ("1000 x 20: content changed", changed),
                ("1000 x 20: a poll, same content", polled), ("1000 x 20: unchanged (cached)", cached)]
        if compare is not None:
            stamp += 1
            _install(_timed(compare.read_bytes()), dest, stamp)
            old_changed, old_cached = [], []
            for _ in range(max(2, n // 2)):
                publish(True, int(time.time()) - 1)
                sbatch(old_changed)
                sbatch(old_cached)
            rows += [(f"{compare.name}: content changed", old_changed),
                     (f"{compare.name}: unchanged (cached)", old_cached)]
        print(f"{'':>40}  sbatch wall ms (median, min-max)   map read in slurmctld, CPU ms (median, max)")
        for name, values in rows:
            inside = cpu.get(id(values), [])
            print(f"{name:>40}: {statistics.median(values):8.2f} ({min(values):6.2f}-{max(values):7.2f})"
                  f" n={len(values)}"
                  + (f"   {statistics.median(inside):8.3f} (max {max(inside):.3f}) n={len(inside)}" if inside else
                     "   (not logged)"))
    finally:
        for jid in jobs:
            subprocess.run(["scancel", str(jid)], env=env, capture_output=True, timeout=60)
        aside.unlink(missing_ok=True)
        if before_map is None:
            map_path.unlink(missing_ok=True)
        else:
            _install(before_map, map_path, time.time())
        _install(before, dest, max(time.time(), stamp) + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", default=str(REPO / "etc" / "job_submit.lua"))
    ap.add_argument("--compare", help="another job_submit.lua to time the same way (e.g. an older version)")
    ap.add_argument("--cached", type=int, default=5000, help="submissions timed with an unchanged map")
    ap.add_argument("--cold", type=int, default=20, help="submissions timed with the map parsed each time")
    ap.add_argument("--testbed", type=int, metavar="N", help="median sbatch latency on the running testbed, N rounds")
    args = ap.parse_args()
    if args.testbed:
        testbed(args.testbed, Path(args.script), Path(args.compare) if args.compare else None)
        return
    if shutil.which("lua5.1") is None:
        raise SystemExit("lua5.1 not installed (apt-get install lua5.1)")
    scripts = [("this", Path(args.script))] + ([("compare", Path(args.compare))] if args.compare else [])
    print(f"{'accounts':>8} {'classes':>7} {'map KiB':>8} " + " ".join(
        f"{name + ' cold ms':>16} {name + ' poll ms':>16} {name + ' cached ms':>18}" for name, _ in scripts))
    with tempfile.TemporaryDirectory() as d:
        for accounts, classes in SIZES:
            text = build_map(accounts, classes)
            path = Path(d) / "gpu_type_map.txt"
            path.write_text(text)
            row = f"{accounts:>8} {classes:>7} {len(text.encode()) / 1024:>8.0f} "
            for name, script in scripts:
                # the compared script parses on every submission either way: as many as cold, not hours
                cold, poll, cached, typed = measure(script, path, accounts, classes, args.cold,
                                                    args.cached if name == "this" else args.cold)
                if typed == 0:
                    raise SystemExit(f"{script}: no job was typed: the benchmark measures nothing")
                row += f"{cold:>16.3f} {poll:>16.3f} {cached:>18.4f} "
            print(row.rstrip(), flush=True)


if __name__ == "__main__":
    main()
