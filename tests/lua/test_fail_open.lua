-- Offline tests of etc/job_submit.lua (issue 29): the script fails open, always; a stale map is ignored; jobs
-- naming --constraint/--nodelist/--exclude are left alone; the parsed map is cached per change.
-- Run: lua5.1 tests/lua/test_fail_open.lua [path/to/job_submit.lua]   (from the repository root)

local SCRIPT = arg[1] or "etc/job_submit.lua"
local H = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/harness.lua")
local read, write, case, eq, has = H.read, H.write, H.case, H.eq, H.has
local SOURCE = read(SCRIPT)

-- load the script from a fresh folder as slurmctld does; map_text nil = no map file
local function load(map_text)
	return H.load(SOURCE, map_text)
end

local function submit(job)
	return slurm_job_submit(job, {}, 1000)
end

-- the header the daemon writes (slurm_fair/daemon/type_map_file.py), without any line
local HEADER = "#@map 3f9a01bc-1 1700000000\n"
	.. "# slurm-fair GPU type map, rewritten by the daemon each round: do not edit.\n"
	.. "@classes comment,wckey,name\n"

-- an untyped GPU job passes as it was submitted, with a note naming `why`
local function passes(job_fields, why)
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1", comment = "mine" }
	for k, v in pairs(job_fields or {}) do
		job[k] = v
	end
	local before = {}
	for k, v in pairs(job) do
		before[k] = v
	end
	eq(submit(job), slurm.SUCCESS, "rc")
	for k, v in pairs(before) do
		eq(job[k], v, "job field " .. k)
	end
	for k, v in pairs(job) do
		eq(before[k], v, "job field added: " .. k)
	end
	has(slurm.user, why, "note to the user")
	has(slurm.user, "left unchanged", "note to the user")
	return job
end

local BAD = {
	{ "garbage bytes", "\0\1\2\255\254 \128\129\n\200\201 zz\n", "the GPU type map is broken" },
	{ "empty", "", "is empty" },
	{ "only blanks", "\n  \n\t\n", "is empty" },
	{ "only the header", HEADER, "no GPU type is known for account 'acct_a'" },
	{ "no '*' line, account without a line", HEADER .. "acct_b v100:2\n", "no GPU type is known for account" },
	{ "a bad line", HEADER .. "acct_a v100:x\n* k80\n", "bad GPU type 'v100:x'" },
}
for _, b in ipairs(BAD) do
	case("fails open: " .. b[1], function()
		load(b[2])
		passes(nil, b[3])
		passes({ tres_per_job = "gres/gpu=2", tres_per_node = nil }, b[3]) -- 24.11 --gpus=2
		eq(submit({ account = "acct_a" }), slurm.SUCCESS, "non-GPU job")
		eq(submit({ account = "acct_a", tres_per_node = "gres:gpu:v100:1" }), slurm.SUCCESS, "typed job")
	end)
end

case("fails open: unreadable map (mode 000; skipped as root)", function()
	local dir = load("* v100\n")
	os.execute("chmod 000 '" .. dir .. "/gpu_type_map.txt'")
	local f = io.open(dir .. "/gpu_type_map.txt", "r")
	if f then -- root reads it anyway
		f:close()
		return
	end
	passes(nil, "the GPU type map is broken (cannot read")
end)

case("fails open: a Lua error after the fields were edited puts them back", function()
	load("* v100\n")
	slurm_fair_submit.with_flex = function() error("injected bug") end
	local job = passes({ tres_per_job = "gres:gpu:2" }, "internal error")
	eq(job.tres_per_node, "gres:gpu:1", "first field restored")
	eq(job.tres_per_job, "gres:gpu:2", "second field restored")
	has(slurm.err, "injected bug", "ctld log")
end)

case("fails open: a Lua error after the comment was set clears it again (it had none)", function()
	load("* v100\n")
	slurm.log_user = function() error("injected bug") end -- after the edits: the note to the user
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "restored")
	eq(job.comment, nil, "comment cleared")
	has(slurm.err, "injected bug", "ctld log")
end)

case("fails open: an error in the logging itself", function()
	load("* v100\n")
	slurm_fair_submit.choose = function() error("injected bug") end
	slurm.log_error = function() error("log broken too") end
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "unchanged")
end)

case("a map past its #@expires is ignored (the daemon stopped); before it, it types", function()
	load("#@map x-1 1000\n#@expires 2000\n* v100:8\n")
	slurm_fair_submit.clock = function() return 1999 end
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:v100:1", "typed before it expires")
	slurm_fair_submit.clock = function() return 2061 end
	passes(nil, "is stale (expired 61 s ago")
	has(slurm.err, "is stale", "ctld log")
end)

case("a map without #@expires never goes stale (hand-written maps, older daemons)", function()
	load("* v100:8\n")
	slurm_fair_submit.clock = function() return 4e9 end
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:v100:1")
end)

for _, p in ipairs({ { "features", "a100", "--constraint=a100" }, { "req_nodes", "node-1", "--nodelist=node-1" },
	{ "exc_nodes", "node-[2-3]", "--exclude=node-[2-3]" } }) do
	case("a job naming " .. p[3] .. " is left alone, with a note", function()
		load("* v100:8\n")
		passes({ [p[1]] = p[2] }, "the job names " .. p[3])
		local typed = { account = "acct_a", tres_per_node = "gres:gpu:a100:1", [p[1]] = p[2] }
		eq(submit(typed), slurm.SUCCESS, "typed job")
		eq(typed.tres_per_node, "gres:gpu:a100:1", "typed job unchanged")
	end)
end

case("empty placement fields do not count", function()
	load("* v100:8\n")
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1", features = "", req_nodes = "(null)" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:v100:1")
end)

-- counts SF.parse_map calls
local function counting()
	local sf = slurm_fair_submit
	local real, n = sf.parse_map, { 0 }
	sf.parse_map = function(text)
		n[1] = n[1] + 1
		return real(text)
	end
	return n
end

local function typed_as(want)
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:" .. want .. ":1", "type")
end

case("cache: a map with a #@map first line is parsed once per publication", function()
	local dir = load("#@map a-1 1000\n* v100:100\n")
	local n = counting()
	for _ = 1, 5 do
		typed_as("v100")
	end
	eq(n[1], 1, "parsed once for 5 submissions")
	write(dir .. "/gpu_type_map.txt", "#@map a-2 1000\n* k80:100\n") -- a new publication (same size)
	typed_as("k80")
	eq(n[1], 2, "parsed again after the first line changed")
	write(dir .. "/gpu_type_map.txt", "#@map a-2 1000\n* a100:100\n") -- same first line, other size
	typed_as("a100")
	eq(n[1], 3, "parsed again after the size changed")
end)

case("cache: a map without #@map first is keyed by its text", function()
	local dir = load("* v100:100\n")
	local n = counting()
	typed_as("v100")
	typed_as("v100")
	eq(n[1], 1, "parsed once")
	write(dir .. "/gpu_type_map.txt", "* k80:100\n") -- same size, same second
	typed_as("k80")
	eq(n[1], 2, "parsed again: the text changed")
end)

case("cache: a broken map stays broken until it changes, then types again", function()
	local dir = load("#@map b-1 1000\nacct_a v100:x\n")
	local n = counting()
	passes(nil, "bad GPU type 'v100:x'")
	passes(nil, "bad GPU type 'v100:x'")
	eq(n[1], 1, "parsed once")
	write(dir .. "/gpu_type_map.txt", "#@map b-2 1000\n* v100:100\n")
	typed_as("v100")
	os.remove(dir .. "/gpu_type_map.txt")
	local told = #slurm.user
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "unchanged: the cached map is not used once the file is gone")
	eq(#slurm.user, told, "no note to the user for a missing map")
	has(slurm.info, "no GPU type map yet")
end)

case("cache: the rooms spent count per publication, not per parse", function()
	local dir = load("#@map c-1 1000\nacct_a v100:1,k80:5\n")
	slurm_fair_submit.clock = function() return 500 end -- handed out before the next map's snapshot (1000)
	typed_as("v100")
	typed_as("k80") -- v100's room of 1 is spent: the cached map keeps the count
	write(dir .. "/gpu_type_map.txt", "#@map c-2 1000\nacct_a v100:1,k80:5\n")
	typed_as("v100") -- a new publication starts unspent (what was handed out before its snapshot is in it)
end)

H.finish()
