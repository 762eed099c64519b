-- Offline tests of job_submit.lua's partition-aware typing (`#@partition` lines of the map) and of its module
-- form (loaded by a site's own job_submit.lua: slurm_fair/share/job_submit_site_example.lua), with a mocked
-- `slurm` table (no cluster needed).
-- Run: lua5.1 tests/lua/test_partitions.lua [path/to/job_submit.lua [path/to/site_example.lua]]   (repo root)
-- Prints "N passed, N failed"; exit 1 on failure.

local SCRIPT = arg[1] or "etc/job_submit.lua"
local EXAMPLE = arg[2] or "slurm_fair/share/job_submit_site_example.lua"
local H = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/harness.lua")
local read, write, case, eq, has = H.read, H.write, H.case, H.eq, H.has
local SOURCE = read(SCRIPT)
local NO_VAL = 4294967294

-- the top-level script (as slurmctld loads it) from a fresh folder with this map
-- load the script from a fresh folder as slurmctld does; map_text nil = no map file
local function load(map_text)
	return H.load(SOURCE, map_text)
end

-- part_list as Slurm passes it: partition name -> a record whose fields are read through a metatable
local function parts(default, ...)
	local list = {}
	for _, name in ipairs({ default, ... }) do
		local is_default = name == default and 1 or 0
		list[name] = setmetatable({}, { __index = function(_, k)
			if k == "flag_default" then
				return is_default
			elseif k == "name" then
				return name
			end
		end })
	end
	return list
end

local PMAP = table.concat({
	"# slurm-fair GPU type map",
	"@classes comment,wckey,name",
	"#@partition p1 a100",
	"#@partition p2 k80,v100",
	"#@partition gpu a100,k80,v100",
	"acct_a a100:2,v100:2|k80:4 room",
	"acct_b a100:4 room on a100 only",
	"acct_b/rl k80,v100,a100",
	"acct_a/cnn v100,a100,k80",
	"* k80:1,v100:1 free",
}, "\n") .. "\n"

local function typed(map, job, part_list)
	job.account = job.account or "acct_a"
	job.tres_per_node = job.tres_per_node or "gres:gpu:1"
	eq(slurm_job_submit(job, part_list or parts("gpu", "p1", "p2"), 1000), slurm.SUCCESS, "rc")
	return job.tres_per_node
end

case("-p p1 / -p p2: only the partition's types; -p p1,p2: the union, in the account's order", function()
	load(PMAP)
	eq(typed(PMAP, { partition = "p2" }), "gres:gpu:v100:1", "p2 has no a100: v100 first")
	eq(typed(PMAP, { partition = "p1" }), "gres:gpu:a100:1", "p1 has only a100")
	eq(typed(PMAP, { partition = "p1,p2" }), "gres:gpu:a100:1", "a100's room (2) has one left")
	eq(typed(PMAP, { partition = "p2,p1" }), "gres:gpu:v100:1", "a100 used up: the next type of the union")
	eq(typed(PMAP, { partition = "p2" }), "gres:gpu:k80:1", "v100's room used up: the next tier")
end)

case("rooms used up: the first type of the partition's, never one outside it", function()
	load("#@partition p2 k80,v100\n#@partition p1 a100\nacct_a a100:1,v100:1\n")
	local got = {}
	for _ = 1, 3 do
		got[#got + 1] = typed(nil, { partition = "p2" })
	end
	eq(table.concat(got, " "), "gres:gpu:v100:1 gres:gpu:v100:1 gres:gpu:v100:1", "v100, then waits for v100")
	has(slurm.user, "every type's room in the map is used by earlier submissions; waits for v100")
end)

case("no -p: the partition part_list flags as the default", function()
	load(PMAP)
	eq(typed(PMAP, {}, parts("p2", "p1", "gpu")), "gres:gpu:v100:1", "default p2")
	eq(typed(PMAP, {}, parts("p1", "p2")), "gres:gpu:a100:1", "default p1")
	local plain = { p2 = { flag_default = 1 }, p1 = { flag_default = 0, name = "p1" } }
	eq(typed(PMAP, {}, plain), "gres:gpu:v100:1", "plain tables work too")
end)

case("several partitions flagged default (the old one after a runtime change): only types all of them have", function()
	load(PMAP)
	local both = { gpu = { flag_default = 1 }, p2 = { flag_default = 1 }, p1 = { flag_default = 0 } }
	eq(typed(PMAP, {}, both), "gres:gpu:v100:1", "gpu and p2 flagged: v100 and k80 are in both; a100 is not")
	local apart = { p1 = { flag_default = 1 }, p2 = { flag_default = 1 } }
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(slurm_job_submit(job, apart, 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "p1 and p2 have no type in common: untyped")
	has(slurm.user, "default partition p1,p2 (all flagged) have no GPU type in common in the map")
end)

case("no -p and no default partition: left untyped with a note, never rejected", function()
	load(PMAP)
	local job = { account = "acct_a", tres_per_node = "gres:gpu:2", comment = "x" }
	eq(slurm_job_submit(job, parts(nil), 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:2", "unchanged")
	eq(job.comment, "x", "no fair:flex")
	has(slurm.user, "slurm-fair: note: the job names no partition and none is the default; untyped GPU request "
		.. "left unchanged")
end)

case("none of the account's types in the job's partitions: untyped with a note", function()
	load(PMAP)
	local job = { account = "acct_b", partition = "p2", tres_per_job = "gres/gpu:1" }
	eq(slurm_job_submit(job, parts("gpu", "p2"), 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_job, "gres/gpu:1", "unchanged")
	eq(job.comment, nil, "no fair:flex")
	has(slurm.user, "none of the types for account acct_b (a100) is in partition p2 (k80,v100); untyped GPU "
		.. "request left unchanged")
	has(slurm.info, "account=acct_b: none of the types")
end)

case("a partition the map does not name (no GPUs, or created since): untyped with a note", function()
	load(PMAP)
	local job = { account = "acct_a", partition = "cpu", tres_per_node = "gres:gpu:1" }
	eq(slurm_job_submit(job, parts("gpu", "cpu"), 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "unchanged")
	has(slurm.user, "partition cpu has no GPU type in the map")
	eq(typed(PMAP, { partition = "cpu,p1" }), "gres:gpu:a100:1", "with a known one: its types")
end)

case("class lines reorder within the partition's types; the '*' line is filtered too", function()
	load(PMAP)
	eq(typed(PMAP, { account = "acct_b", name = "rl", partition = "gpu" }), "gres:gpu:a100:1",
		"acct_b's line has only a100 (the class line reorders, never adds)")
	eq(typed(PMAP, { account = "acct_z", partition = "p1,p2" }), "gres:gpu:k80:1", "'*' line: k80 first")
	eq(typed(PMAP, { account = "acct_z", partition = "p1" }), "gres:gpu:1", "'*' has no a100: untyped")
	eq(typed(PMAP, { name = "cnn", partition = "gpu" }), "gres:gpu:v100:1", "class cnn: v100 before a100")
	eq(typed(PMAP, { name = "cnn", partition = "p1" }), "gres:gpu:a100:1", "class cnn in p1: a100 only")
end)

case("a map without partition lines types as before, whatever the partition", function()
	load("acct_a a100:4\n")
	eq(typed(nil, { partition = "p2" }), "gres:gpu:a100:1", "no partition lines: no restriction")
	eq(typed(nil, {}, parts(nil)), "gres:gpu:a100:1", "no default partition either")
end)

case("typed and non-GPU jobs untouched in any partition", function()
	load(PMAP)
	local job = { account = "acct_a", partition = "p1", tres_per_node = "gres:gpu:k80:1" }
	eq(slurm_job_submit(job, parts("gpu"), 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:k80:1")
	eq(#slurm.user, 0, "no message")
end)

local BROKEN = {
	{ "#@partition p1\nacct_a a100\n", "line 1: expected '#@partition NAME TYPE,...'" },
	{ "#@partition p1 a100,,k80\n", "line 1: bad GPU type ''" },
	{ "#@partition p1 2\n", "line 1: bad GPU type '2'" },
	{ "#@partition p1 a100\n#@partition p1 k80\n", "line 2: second line for partition 'p1'" },
	{ "#@partition p:1 a100\n", "line 1: expected '#@partition NAME TYPE,...'" },
}
for _, b in ipairs(BROKEN) do
	case("broken partition line: " .. b[2], function()
		load(b[1] .. "* a100\n")
		local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
		eq(slurm_job_submit(job, parts("p1"), 1000), slurm.SUCCESS, "rc (a broken map, as every other bad line)")
		eq(job.tres_per_node, "gres:gpu:1", "unchanged (fails open)")
		has(slurm.user, b[2])
	end)
end

case("'#@partitions' and '# @partition' are comments", function()
	load("#@partitions p1 a100\n# @partition p1 a100\nacct_a k80\n")
	eq(typed(nil, { partition = "p1" }), "gres:gpu:k80:1", "no partition lines: no restriction")
end)

-- ------------------------------------------------------------------------------------- the module form

-- the module in a fresh folder as slurm_fair_submit.lua (with the map next to it)
local function module_dir(map_text)
	return H.prepare(SOURCE, map_text, "slurm_fair_submit.lua")
end

local function globals()
	local g = {}
	for k in pairs(_G) do
		g[k] = true
	end
	return g
end

case("dofile: returns the module, defines no globals; job_submit types, job_modify passes", function()
	local dir = module_dir(PMAP)
	local before = globals()
	local sf = dofile(dir .. "/slurm_fair_submit.lua")
	for k in pairs(_G) do
		assert(before[k], "new global " .. tostring(k))
	end
	eq(type(sf), "table", "module")
	eq(slurm_job_submit, nil, "no slurm_job_submit")
	local job = { account = "acct_a", partition = "p2", tres_per_node = "gres:gpu:1" }
	eq(sf.job_submit(job, parts("gpu"), 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:v100:1")
	eq(job.comment, "fair:flex")
	eq(sf.map_path(), dir .. "/gpu_type_map.txt", "the map next to the module")
	local desc = { tres_per_node = "gres:gpu:2" }
	eq(sf.job_modify(desc, { account = "acct_a" }, {}, 0), slurm.SUCCESS, "modify rc")
	eq(desc.tres_per_node, "gres:gpu:2")
	has(slurm.info, "slurm-fair job_submit module loaded; type map " .. dir .. "/gpu_type_map.txt")
end)

case("require through package.path: one module table, its counts kept between submissions", function()
	local dir = module_dir("acct_a a100:1,v100:1\n")
	local saved = package.path
	package.path = dir .. "/?.lua;" .. package.path
	package.loaded.slurm_fair_submit = nil
	local ok, sf = pcall(require, "slurm_fair_submit")
	package.path = saved
	assert(ok, tostring(sf))
	eq(require("slurm_fair_submit"), sf, "the same table")
	eq(slurm_job_submit, nil, "no globals")
	local got = {}
	for _ = 1, 2 do
		local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
		sf.job_submit(job, {}, 0)
		got[#got + 1] = job.tres_per_job
	end
	eq(table.concat(got, " "), "gres:gpu:a100:1 gres:gpu:v100:1", "a100's room counted")
	package.loaded.slurm_fair_submit = nil
end)

case("sf.map_file: the site names another map", function()
	local dir = module_dir(nil)
	write(dir .. "/elsewhere.txt", "acct_a k80\n")
	local sf = dofile(dir .. "/slurm_fair_submit.lua")
	sf.map_file = dir .. "/elsewhere.txt"
	local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	sf.job_submit(job, {}, 0)
	eq(job.tres_per_job, "gres:gpu:k80:1")
end)

case("a module's internal error: logged, every job passes", function()
	local dir = module_dir(PMAP)
	local sf = dofile(dir .. "/slurm_fair_submit.lua")
	sf.read_map = function() error("injected bug") end
	eq(sf.job_submit({ account = "acct_a", tres_per_job = "gres:gpu:1" }, {}, 0), slurm.SUCCESS, "GPU job")
	eq(sf.job_submit({ account = "acct_a" }, {}, 0), slurm.SUCCESS, "non-GPU job")
	has(slurm.err, "injected bug")
end)

-- the shipped site example as the top-level job_submit.lua, the module next to it (or not)
local function site(map_text, module_source)
	local dir = H.prepare(read(EXAMPLE), map_text)
	if module_source then
		write(dir .. "/slurm_fair_submit.lua", module_source)
	end
	assert(H.load_top(dir .. "/job_submit.lua") == slurm.SUCCESS, "site script loads")
	return dir
end

case("site example: its own rule and slurm-fair's typing both apply", function()
	site(PMAP, SOURCE)
	eq(slurm_fair_submit, nil, "the module set no global")
	local job = { account = "acct_a", partition = "p2", tres_per_node = "gres:gpu:1", time_limit = NO_VAL }
	eq(slurm_job_submit(job, parts("gpu", "p2"), 1000), slurm.SUCCESS, "rc")
	eq(job.time_limit, 60, "the site's default time limit")
	eq(job.tres_per_node, "gres:gpu:v100:1", "typed by slurm-fair within p2")
	eq(job.comment, "fair:flex")
	has(slurm.user, "site: no --time given")
	has(slurm.user, "given type 'v100'")
	local given = { account = "acct_a", tres_per_node = "gres:gpu:k80:1", time_limit = 30 }
	eq(slurm_job_submit(given, parts("gpu"), 1000), slurm.SUCCESS, "rc")
	eq(given.time_limit, 30, "a given time limit kept")
	eq(slurm_job_modify({}, {}, {}, 0), slurm.SUCCESS, "modify")
end)

case("site example without the module, or with a broken one: loads, the site's rule alone applies", function()
	for _, src in ipairs({ false, "this is not lua(", "error('boom at load')" }) do
		site(PMAP, src or nil)
		has(slurm.err, "slurm-fair module")
		local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
		eq(slurm_job_submit(job, parts("gpu"), 1000), slurm.SUCCESS, "rc")
		eq(job.tres_per_node, "gres:gpu:1", "not typed")
		eq(job.time_limit, 60, "site rule")
		eq(slurm_job_modify({}, {}, {}, 0), slurm.SUCCESS, "modify")
	end
end)

H.finish()
