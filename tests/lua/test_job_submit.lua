-- Offline tests of etc/job_submit.lua with a mocked `slurm` table (no cluster needed).
-- Run: lua5.1 tests/lua/test_job_submit.lua [path/to/job_submit.lua]   (from the repository root)
-- Each case copies the script into a fresh folder, writes (or not) gpu_type_map.txt next to it, loads it
-- as slurmctld does (the top-level script) and calls slurm_job_submit with a plain table as job_desc. Prints
-- "N passed, N failed"; exit 1 on failure. Partitions and the module form: tests/lua/test_partitions.lua.

local SCRIPT = arg[1] or "etc/job_submit.lua"
local H = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/harness.lua")
local read, write, case, eq, has = H.read, H.write, H.case, H.eq, H.has
local SOURCE = read(SCRIPT)

-- load the script from a fresh folder as slurmctld does; map_text nil = no map file
local function load(map_text)
	return H.load(SOURCE, map_text)
end

local MAP = table.concat({
	"# written by slurm-fair",
	"acct_a v100 most room in its share (limit 4, in use 1, pending 0)",
	"acct_b k80",
	"",
	"* a100 most unallocated GPUs",
}, "\n") .. "\n"

local function submit(job)
	return slurm_job_submit(job, {}, 1000)
end

-- every request form of 22.05 and 24.11 (notes A1): field, value given, value expected for type v100
local FORMS = {
	{ "tres_per_node", "gres:gpu:2", "gres:gpu:v100:2" }, -- 22.05 --gres=gpu:2 / --gpus-per-node=2
	{ "tres_per_node", "gres:gpu", "gres:gpu:v100" }, -- 22.05 --gres=gpu
	{ "tres_per_job", "gres:gpu:2", "gres:gpu:v100:2" }, -- 22.05 --gpus=2
	{ "tres_per_task", "gres:gpu:1", "gres:gpu:v100:1" }, -- 22.05 --gpus-per-task=1
	{ "tres_per_socket", "gres:gpu:1", "gres:gpu:v100:1" }, -- 22.05 --gpus-per-socket=1
	{ "tres_per_node", "gres/gpu:2", "gres/gpu:v100:2" }, -- 24.11 --gres=gpu:2
	{ "tres_per_node", "gres/gpu", "gres/gpu:v100" }, -- 24.11 --gres=gpu
	{ "tres_per_job", "gres/gpu:2", "gres/gpu:v100:2" }, -- 24.11 --gpus=2
	{ "tres_per_task", "gres/gpu=1", "gres/gpu:v100:1" }, -- 24.11 --gpus-per-task=1
	{ "tres_per_task", "cpu=4,gres/gpu=1", "cpu=4,gres/gpu:v100:1" }, -- 24.11 -c 4 --gpus-per-task=1
	{ "tres_per_socket", "gres/gpu:1", "gres/gpu:v100:1" }, -- 24.11 --gpus-per-socket=1
	{ "tres_per_node", "gres:mps:10,gres:gpu:1", "gres:mps:10,gres:gpu:v100:1" }, -- other GRES kept
}

for _, f in ipairs(FORMS) do
	case("types " .. f[1] .. "=" .. f[2], function()
		load(MAP)
		local job = { account = "acct_a", [f[1]] = f[2] }
		eq(submit(job), slurm.SUCCESS, "rc")
		eq(job[f[1]], f[3], f[1])
		eq(job.comment, "fair:flex", "comment")
		has(slurm.info, f[2] .. " -> " .. f[3], "ctld log")
	end)
end

case("two fields of one job are both typed", function()
	load(MAP)
	local job = { account = "acct_a", tres_per_job = "gres:gpu:2", tres_per_task = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_job, "gres:gpu:v100:2")
	eq(job.tres_per_task, "gres:gpu:v100:1")
end)

local TYPED = {
	{ "tres_per_node", "gres:gpu:k80:1" }, { "tres_per_node", "gres:gpu:k80" }, { "tres_per_job", "gres:gpu:k80:2" },
	{ "tres_per_node", "gres/gpu:k80:1" }, { "tres_per_job", "gres/gpu:k80:2" }, { "tres_per_task", "gres/gpu:k80=1" },
}
for _, f in ipairs(TYPED) do
	case("typed " .. f[1] .. "=" .. f[2] .. " untouched", function()
		load(MAP)
		local job = { account = "acct_a", [f[1]] = f[2], comment = "class=cnn" }
		eq(submit(job), slurm.SUCCESS, "rc")
		eq(job[f[1]], f[2], f[1])
		eq(job.comment, "class=cnn", "comment")
		eq(#slurm.user, 0, "messages to the user")
	end)
end

case("non-GPU job untouched (cpu only, mps, 0 GPUs)", function()
	load(MAP)
	for _, job in ipairs({
		{ account = "acct_a" },
		{ account = "acct_a", tres_per_task = "cpu=4" },
		{ account = "acct_a", tres_per_node = "gres:mps:10" },
		{ account = "acct_a", tres_per_node = "gres:gpu:0" },
	}) do
		local before = job.tres_per_node
		eq(submit(job), slurm.SUCCESS, "rc")
		eq(job.tres_per_node, before, "tres_per_node")
		eq(job.comment, nil, "comment")
	end
	eq(#slurm.user, 0, "messages to the user")
end)

case("user's comment kept, fair:flex appended once", function()
	load(MAP)
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1", comment = "class=cnn" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.comment, "class=cnn fair:flex", "comment")
	local again = { account = "acct_a", tres_per_node = "gres:gpu:1", comment = "class=cnn fair:flex" }
	submit(again)
	eq(again.comment, "class=cnn fair:flex", "comment already marked")
end)

case("reason text from the map reaches the user", function()
	load(MAP)
	local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	submit(job)
	has(slurm.user, "slurm-fair: untyped GPU request given type 'v100' (account acct_a: most room in its share "
		.. "(limit 4, in use 1, pending 0))")
end)

case("no reason in the map: type and account only", function()
	load(MAP)
	local job = { account = "acct_b", tres_per_job = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_job, "gres:gpu:k80:1")
	has(slurm.user, "given type 'k80' (account acct_b)")
end)

case("default account used when -A is not given", function()
	load(MAP)
	local job = { default_account = "acct_b", tres_per_node = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:k80:1")
	local both = { account = "acct_a", default_account = "acct_b", tres_per_node = "gres:gpu:1" }
	submit(both)
	eq(both.tres_per_node, "gres:gpu:v100:1", "-A wins over the default account")
end)

case("'*' default for an account without a line", function()
	load(MAP)
	local job = { account = "acct_c", tres_per_node = "gres/gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres/gpu:a100:1")
	has(slurm.user, "given type 'a100' (account acct_c: no entry for the account; default: most unallocated GPUs)")
end)

case("no entry and no '*': untyped GPU job passes unchanged with a note (fails open)", function()
	load("acct_a v100\n")
	local job = { account = "acct_c", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "unchanged")
	eq(job.comment, nil, "no flex mark")
	has(slurm.user, "no GPU type is known for account 'acct_c'")
	has(slurm.user, "untyped GPU request left unchanged")
	has(slurm.err, "untyped request passed", "ctld log")
	eq(submit({ account = "acct_c" }), slurm.SUCCESS, "non-GPU job")
	eq(submit({ account = "acct_c", tres_per_node = "gres:gpu:k80:1" }), slurm.SUCCESS, "typed job")
end)

case("#@listed-only (a pilot): an account without a line is left alone; a listed one is typed", function()
	load("@classes comment,wckey,name\n#@listed-only\n#@a-newer-directive x y\nacct_a v100:4\n")
	local job = { account = "acct_c", tres_per_node = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "unchanged")
	eq(job.comment, nil, "no flex mark")
	eq(#slurm.user, 0, "nothing said to the user")
	local mine = { account = "acct_a", tres_per_node = "gres:gpu:1" }
	eq(submit(mine), slurm.SUCCESS, "rc")
	eq(mine.tres_per_node, "gres:gpu:v100:1", "pilot account typed")
end)

case("missing map (shadow mode publishes none): job passes unchanged, nothing said to the user", function()
	local dir = load(nil)
	local job = { account = "acct_a", tres_per_node = "gres:gpu:1", comment = "x" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "unchanged")
	eq(job.comment, "x", "comment unchanged")
	eq(#slurm.user, 0, "messages to the user")
	has(slurm.info, "no GPU type map yet (" .. dir .. "/gpu_type_map.txt does not exist)")
	has(slurm.info, "nothing said to the user")
end)

local BROKEN = {
	{ "acct_a\n", "line 1: expected 'ACCOUNT TYPES [REASON]'" },
	{ "acct_a v100:x\n", "line 1: bad GPU type 'v100:x'" },
	{ "acct_a v100:2,,k80:1\n", "line 1: bad GPU type ''" },
	{ "# ok\nacct_a v100\nacct_a k80\n", "line 3: second line for account 'acct_a'" },
	{ "acct_a gpu:v100\n", "line 1: bad GPU type 'gpu:v100'" },
	{ "acct_a 2\n", "line 1: bad GPU type '2'" },
	{ "* v100\n* k80\n", "line 2: second '*' line" },
	{ "acct,a v100\n", "line 1: bad account name 'acct,a'" },
}
for _, b in ipairs(BROKEN) do
	case("broken map: untyped GPU job passes unchanged with a note: " .. b[2], function()
		load(b[1])
		local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
		eq(submit(job), slurm.SUCCESS, "rc")
		eq(job.tres_per_job, "gres:gpu:1", "unchanged")
		eq(job.comment, nil, "no flex mark")
		has(slurm.user, "the GPU type map is broken")
		has(slurm.user, b[2])
		has(slurm.user, "left unchanged")
		has(slurm.err, b[2], "ctld log")
		eq(submit({ account = "acct_a" }), slurm.SUCCESS, "non-GPU job passes")
		eq(submit({ account = "acct_a", tres_per_job = "gres:gpu:k80:1" }), slurm.SUCCESS, "typed job passes")
	end)
end

case("unreadable map (a folder) counts as broken: the job passes unchanged", function()
	local dir = load(nil)
	assert(os.execute("mkdir '" .. dir .. "/gpu_type_map.txt'") == 0)
	local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_job, "gres:gpu:1", "unchanged")
	has(slurm.user, "the GPU type map is broken")
	eq(submit({ account = "acct_a" }), slurm.SUCCESS, "non-GPU job passes")
end)

case("map re-read on every submission", function()
	local dir = load("acct_a v100\n")
	local j1 = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	submit(j1)
	eq(j1.tres_per_job, "gres:gpu:v100:1")
	write(dir .. "/gpu_type_map.txt", "acct_a k80\n")
	local j2 = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	submit(j2)
	eq(j2.tres_per_job, "gres:gpu:k80:1")
end)

case("a burst spreads over the types in map order, each up to its room", function()
	load("acct_a a100:2,v100:3,k80:1 room\n* k80\n")
	local got = {}
	for i = 1, 8 do
		local job = { account = "acct_a", tres_per_node = "gres:gpu:1" }
		eq(submit(job), slurm.SUCCESS, "rc")
		got[#got + 1] = job.tres_per_node
	end
	eq(table.concat(got, " "), "gres:gpu:a100:1 gres:gpu:a100:1 gres:gpu:v100:1 gres:gpu:v100:1 gres:gpu:v100:1 "
		.. "gres:gpu:k80:1 gres:gpu:a100:1 gres:gpu:a100:1", "types in order; past every room the first type")
	has(slurm.user, "every type's room in the map is used by earlier submissions; waits for a100")
end)

case("a job of N GPUs needs N left in a type's room; nodes and tasks multiply", function()
	load("acct_a a100:3,v100:8\n")
	local j1 = { account = "acct_a", tres_per_node = "gres:gpu:2", min_nodes = 2 }
	submit(j1)
	eq(j1.tres_per_node, "gres:gpu:v100:2", "4 GPUs do not fit a100's room of 3")
	local j2 = { account = "acct_a", tres_per_task = "gres/gpu=1", num_tasks = 2 }
	submit(j2)
	eq(j2.tres_per_task, "gres/gpu:a100:1", "2 GPUs fit")
	local j3 = { account = "acct_a", tres_per_job = "gres:gpu:2", min_nodes = 4294967294 }
	submit(j3)
	eq(j3.tres_per_job, "gres:gpu:v100:2", "a100 has 1 left; NO_VAL nodes count as 1")
end)

case("a job larger than a type's BLOCK (largest job that fits now) skips the type", function()
	load("acct_a v100:6:2,p100:8:8\n")
	local j1 = { account = "acct_a", tres_per_node = "gres:gpu:4" }
	submit(j1)
	eq(j1.tres_per_node, "gres:gpu:p100:4", "4 > v100's block of 2")
	local j2 = { account = "acct_a", tres_per_node = "gres:gpu:2" }
	submit(j2)
	eq(j2.tres_per_node, "gres:gpu:v100:2", "2 fits v100's block")
end)

case("a new map text resets the counts; accounts count apart; '*' counts for accounts without a line", function()
	local dir = load("acct_a v100:1\n* k80:1,a100:1\n")
	local function typ(acct)
		local job = { account = acct, tres_per_job = "gres:gpu:1" }
		submit(job)
		return job.tres_per_job
	end
	eq(typ("acct_a"), "gres:gpu:v100:1")
	eq(typ("acct_a"), "gres:gpu:v100:1", "room used up: the first type")
	eq(typ("acct_x"), "gres:gpu:k80:1")
	eq(typ("acct_y"), "gres:gpu:a100:1", "the '*' line counts for every account without a line")
	write(dir .. "/gpu_type_map.txt", "acct_a v100:1,k80:5\n* k80:1\n")
	eq(typ("acct_a"), "gres:gpu:v100:1", "new map: counts start again")
	eq(typ("acct_a"), "gres:gpu:k80:1")
end)

case("map identity: rooms spent count only against the map (#@map ID) they were spent on", function()
	local dir = load("#@map t1-1\nacct_a v100:1,k80:1\n")
	local function typ()
		local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
		submit(job)
		return job.tres_per_job
	end
	eq(typ(), "gres:gpu:v100:1")
	eq(typ(), "gres:gpu:k80:1")
	eq(typ(), "gres:gpu:v100:1", "both rooms spent: the first type")
	-- the map re-read with the same identity (no new publication): still spent
	eq(typ(), "gres:gpu:v100:1", "same identity: still spent")
	-- the next publication: the same rooms under a new identity start unspent
	write(dir .. "/gpu_type_map.txt", "#@map t1-2\nacct_a v100:1,k80:1\n")
	eq(typ(), "gres:gpu:v100:1")
	eq(typ(), "gres:gpu:k80:1", "new identity: k80's room is new")
	-- a new daemon (new token) whose first map has an old map's text except its identity: nothing carries over
	write(dir .. "/gpu_type_map.txt", "#@map t2-1\nacct_a v100:1,k80:1\n")
	eq(typ(), "gres:gpu:v100:1")
	eq(typ(), "gres:gpu:k80:1", "a new daemon's map starts unspent")
	has(slurm.user, "waits for v100", "the spent case was told")
end)

case("map identity with a snapshot time: what was handed out since that time still counts", function()
	local dir = load("#@map a-1 990\nacct_a v100:2,k80:2\n")
	local now = 1000
	slurm_fair_submit.clock = function() return now end
	local function typ()
		local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
		submit(job)
		return job.tres_per_job
	end
	eq(typ(), "gres:gpu:v100:1")
	eq(typ(), "gres:gpu:v100:1")
	-- the next poll's snapshot was taken at 999: it did not see the two jobs handed out at 1000
	write(dir .. "/gpu_type_map.txt", "#@map a-2 999\nacct_a v100:2,k80:2\n")
	now = 1004
	eq(typ(), "gres:gpu:k80:1", "v100's room is still spent by the jobs the snapshot did not see")
	-- a snapshot at 1010 saw them all (and the one at 1004): its rooms start unspent
	write(dir .. "/gpu_type_map.txt", "#@map a-3 1010\nacct_a v100:2,k80:2\n")
	eq(typ(), "gres:gpu:v100:1")
	eq(typ(), "gres:gpu:v100:1")
	eq(typ(), "gres:gpu:k80:1")
end)

case("#@free: free rooms on the same idle GPUs are handed out once for every account together", function()
	load("#@map f-1\n#@free a100:2,v100:4\nacct_a a100:2:2,v100:4:4\nacct_b a100:2:2,v100:4:4\n"
		.. "acct_c a100:2,v100:4:4\n")
	local function typ(acct)
		local job = { account = acct, tres_per_job = "gres:gpu:1" }
		submit(job)
		return job.tres_per_job
	end
	eq(typ("acct_a"), "gres:gpu:a100:1")
	eq(typ("acct_a"), "gres:gpu:a100:1")
	eq(typ("acct_b"), "gres:gpu:v100:1", "the 2 idle A100s are handed out: acct_b's free room there is not")
	eq(typ("acct_c"), "gres:gpu:a100:1", "guaranteed room (no BLOCK) waits for reclaim: not bound by #@free")
	eq(typ("acct_b"), "gres:gpu:v100:1")
	eq(typ("acct_a"), "gres:gpu:v100:1", "v100's pool of 4: 3 handed out")
	eq(typ("acct_b"), "gres:gpu:v100:1", "the fourth")
	eq(typ("acct_b"), "gres:gpu:a100:1", "v100's pool spent by three accounts: every room used, the first type")
end)

case("a map without #@map (older daemon, by hand) keys its spent rooms by its text, as before", function()
	local dir = load("acct_a v100:1\n")
	local function typ()
		local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
		submit(job)
		return job.tres_per_job
	end
	eq(typ(), "gres:gpu:v100:1")
	write(dir .. "/gpu_type_map.txt", "#@map bad id here\nacct_a v100:1\n") -- malformed: a comment, text changed
	eq(typ(), "gres:gpu:v100:1", "a new text: unspent")
	local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	submit(job)
	has(slurm.user, "every type's room in the map is used by earlier submissions; waits for v100")
end)

case("#@untyped: a job no type has room for stays untyped within the account's room, then the first type", function()
	load("#@map m-1\nacct_a v100:1,k80:1:1 room\n#@untyped acct_a 3\n* k80\n")
	local function sub(gpus, acct)
		local job = { account = acct or "acct_a", tres_per_node = "gres:gpu:" .. gpus, comment = "mine" }
		eq(submit(job), slurm.SUCCESS, "rc")
		return job
	end
	eq(sub(1).tres_per_node, "gres:gpu:v100:1")
	local big = sub(2)
	eq(big.tres_per_node, "gres:gpu:2", "2 GPUs: v100 has 0 left, k80's block is 1: left untyped")
	eq(big.comment, "mine", "an untyped job's comment is unchanged (no fair:flex)")
	has(slurm.user, "slurm-fair: untyped GPU request left untyped (account acct_a: no GPU type has room for 2 GPU(s)")
	eq(sub(1).tres_per_node, "gres:gpu:k80:1", "k80 still has room for 1")
	eq(sub(1).tres_per_node, "gres:gpu:1", "no type has room; 1 of the untyped room of 3 left")
	eq(sub(1).tres_per_node, "gres:gpu:v100:1", "untyped room used up: the first type, as before")
	eq(sub(4, "acct_x").tres_per_node, "gres:gpu:k80:4", "'*' accounts get no untyped room")
end)

case("#@untyped: not for a class whose line leaves out a type Slurm might give it", function()
	load("acct_a v100:1,k80:1\nacct_a/rl v100\nacct_a/cnn k80,v100\n#@untyped acct_a 4\n")
	local function typ(name)
		local job = { account = "acct_a", name = name, tres_per_node = "gres:gpu:2" }
		submit(job)
		return job.tres_per_node
	end
	eq(typ("rl"), "gres:gpu:v100:2", "rl cannot run on k80: typed, waits for v100")
	eq(typ("cnn"), "gres:gpu:2", "cnn runs on every type: left untyped")
	eq(typ("other"), "gres:gpu:2", "no class line: the account's line (every class of it runs on every type)")
end)

case("#@untyped: not for a class whose line marks a type slow for it (TYPE:0)", function()
	load("acct_a v100:0,k80:0\nacct_a/resnet18 v100,k80:0\nacct_a/lm v100,k80\n#@untyped acct_a 4\n")
	local function typ(name)
		local job = { account = "acct_a", name = name, tres_per_node = "gres:gpu:1" }
		submit(job)
		return job.tres_per_node
	end
	eq(typ("resnet18"), "gres:gpu:v100:1", "resnet18 is slow on k80: typed for its fast type, not left to chance")
	eq(typ("lm"), "gres:gpu:1", "lm runs as well on either: left untyped")
end)

case("#@soon: a job no type has room for is typed to the type expected to start it first, not the line's first", function()
	-- issue 39: 8-GPU jobs pinned to the first type of their account's line waited 30 ks while another type freed
	local MAPTEXT = table.concat({
		"#@soon k80 1:1000,8:5000,16:9000",
		"#@soon p100 1:1000,8:2000,16:9000",
		"#@soon v100 1:1000,2:1000",
		"acct_a v100:2:2,p100:2:2,k80:2:2",
		"acct_b v100:2:2,k80:2:2",
		"acct_c v100:2:2",
	}, "\n") .. "\n"
	local function typ(acct, gpus)
		load(MAPTEXT)
		slurm_fair_submit.clock = function() return 1000 end
		local job = { account = acct, tres_per_node = "gres:gpu:" .. gpus }
		submit(job)
		return job.tres_per_node
	end
	eq(typ("acct_a", 8), "gres:gpu:p100:8", "p100 starts 8 GPUs in 1000 s, k80 in 4000, v100 never (no row)")
	has(slurm.user, "p100 is expected to start it first (in about 1000 s", "the user is told where and when")
	eq(typ("acct_b", 8), "gres:gpu:k80:8", "p100 is not on acct_b's line: k80, not v100")
	eq(typ("acct_c", 8), "gres:gpu:v100:8", "no #@soon row of v100 for 8: the line's first type, as before")
	has(slurm.user, "waits for v100", "the old note")
	eq(typ("acct_a", 2), "gres:gpu:v100:2", "room on v100: typed by room, #@soon not read")
	-- a class that runs at under half its best speed on k80 (k80:0 in its class line) waits for p100 rather than
	-- start first on k80 (4x slower); with no start known elsewhere, k80 still beats the line's first type
	local SLOWMAP = MAPTEXT .. "acct_a/lm v100,p100,k80:0\n"
	local function typ_lm(soon_p100)
		load(SLOWMAP:gsub("#@soon p100 [^\n]*", soon_p100))
		slurm_fair_submit.clock = function() return 1000 end
		local job = { account = "acct_a", name = "lm", tres_per_node = "gres:gpu:8" }
		submit(job)
		return job.tres_per_node
	end
	eq(typ_lm("#@soon p100 1:1000,8:6000,16:9000"), "gres:gpu:p100:8", "k80 starts 8 at 4000 s, p100 at 5000 s: p100")
	eq(typ_lm("#@soon p100 1:1000"), "gres:gpu:k80:8", "no start of 8 known on a fast type: k80 first after all")
	-- later (clock 6000) both would start 8 now by #@soon: only where #@free says the GPUs are still idle
	local function later(maptext)
		load(maptext)
		slurm_fair_submit.clock = function() return 6000 end
		local job = { account = "acct_a", tres_per_node = "gres:gpu:8" }
		submit(job)
		return job.tres_per_node
	end
	eq(later(MAPTEXT), "gres:gpu:v100:8", "no #@free line: a start now is not known to be free, the first type")
	eq(later("#@free k80:8\n" .. MAPTEXT), "gres:gpu:k80:8", "k80's 8 GPUs idle by #@free: k80")
	eq(later("#@free k80:8,p100:8\n" .. MAPTEXT), "gres:gpu:p100:8", "both idle: the line's order")
end)

case("#@soon/#@speed: a job with a time limit is not typed onto a type slow for its class when a faster one finishes it sooner", function()
	-- issue 28: a 4-GPU job typed k80 because only k80 had room for 4 now ran 3.4x longer than waiting 200 s for
	-- a p100 node; k80 runs the class at 178/1000 of its best (v100), p100 at 600/1000
	local MAPTEXT = table.concat({
		"#@soon k80 1:1000,2:1000,4:1000,16:9000",
		"#@soon p100 1:1000,2:1000,4:1200,16:9000",
		"#@soon v100 1:1000,4:50000,16:90000",
		"acct_a v100:3:3,p100:3:3,k80:4:4",
		"acct_a/rec v100,p100,k80:0",
		"#@speed acct_a/rec v100:1000,p100:600,k80:178",
		"acct_a/lm v100,p100,k80",
	}, "\n") .. "\n"
	local function typ(name, gpus, limit)
		load(MAPTEXT) -- a fresh script each time: no room spent by the submission before
		slurm_fair_submit.clock = function() return 1000 end
		local job = { account = "acct_a", name = name, tres_per_node = "gres:gpu:" .. gpus, time_limit = limit }
		submit(job)
		return job.tres_per_node
	end
	eq(typ("rec", 4, 600), "gres:gpu:p100:4", "10 h on k80 against a p100 node in 200 s and 6 h there")
	has(slurm.user, "expected to finish it sooner", "the user is told why")
	eq(typ("rec", 4, nil), "gres:gpu:k80:4", "no time limit: nothing to compare, typed by room")
	eq(typ("rec", 4, 0xfffffffe), "gres:gpu:k80:4", "NO_VAL time limit: typed by room")
	eq(typ("rec", 4, 1), "gres:gpu:k80:4", "a 1-minute job: starting now on k80 beats waiting 200 s")
	eq(typ("lm", 4, 600), "gres:gpu:k80:4", "no #@speed line for the class: typed by room")
	eq(typ("rec", 16, 600), "gres:gpu:p100:16", "no type has room for 16: the type #@soon starts 16 on first "
		.. "(p100 and k80 at 9000, v100 at 90000; p100 comes first in the class's order)")
	has(slurm.user, "p100 is expected to start it first (in about 8000 s", "the user is told why")
	eq(typ("rec", 1, 600), "gres:gpu:v100:1", "1 GPU: v100 has room, kept")
	-- without a time limit, a faster type that can start the job now still wins (whatever its length)
	MAPTEXT = MAPTEXT:gsub("#@soon p100 1:1000,2:1000,4:1200", "#@soon p100 1:1000,2:1000,4:900")
	eq(typ("rec", 4, nil), "gres:gpu:k80:4", "no time limit, p100 can start 4 now by #@soon but no #@free line")
	MAPTEXT = "#@free p100:4,k80:4\n" .. MAPTEXT
	eq(typ("rec", 4, nil), "gres:gpu:p100:4", "no time limit, p100 can start 4 now: p100, not k80")
	has(slurm.user, "expected to finish it sooner", "the user is told why")
	load(MAPTEXT) -- one map, two such jobs: the second finds p100's idle GPUs handed out, and keeps k80
	slurm_fair_submit.clock = function() return 1000 end
	local one = { account = "acct_a", name = "rec", tres_per_node = "gres:gpu:4" }
	local two = { account = "acct_a", name = "rec", tres_per_node = "gres:gpu:4" }
	submit(one)
	submit(two)
	eq(one.tres_per_node .. " " .. two.tres_per_node, "gres:gpu:p100:4 gres:gpu:k80:4", "p100's 4 idle GPUs go once")
	eq(typ("rec", 4, 0xfffffffe), "gres:gpu:p100:4", "NO_VAL time limit: the same")
	eq(typ("lm", 4, nil), "gres:gpu:k80:4", "no #@speed line for the class: typed by room")
end)

case("#@untyped with partitions: the class line needs only the types of the job's partitions", function()
	load("#@partition gpu v100\n#@partition all k80,v100\nacct_a v100:0,k80:0\nacct_a/rl v100\n#@untyped acct_a 4\n")
	local job = { account = "acct_a", name = "rl", partition = "gpu", tres_per_node = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:1", "partition gpu has only v100, which rl runs on")
	job = { account = "acct_a", name = "rl", partition = "all", tres_per_node = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:v100:1", "partition all has k80 too: typed")
end)

case("class lines reorder the account's types for that class; rooms stay the account's", function()
	load("@classes comment,wckey,name\nacct_a v100:1,p100:2,k80:4 room\nacct_a/rl k80,p100\n* k80\n")
	local function typ(job)
		job.account = "acct_a"
		job.tres_per_node = "gres:gpu:1"
		submit(job)
		return job.tres_per_node
	end
	eq(typ({ comment = "x class=rl" }), "gres:gpu:k80:1", "class from the comment: its order")
	eq(typ({ wckey = "*rl" }), "gres:gpu:k80:1", "class from the wckey (default wckey '*rl')")
	eq(typ({ name = "rl" }), "gres:gpu:k80:1", "class from the job name")
	eq(typ({ name = "other" }), "gres:gpu:v100:1", "a class without a line: the account's order")
	eq(typ({ name = "rl" }), "gres:gpu:k80:1", "k80 room 4: the fourth rl job")
	eq(typ({ name = "rl" }), "gres:gpu:p100:1", "k80's room used up: the class's next type")
	eq(typ({ name = "other" }), "gres:gpu:p100:1", "v100's room used by the first other job")
	eq(typ({ name = "rl" }), "gres:gpu:k80:1", "every room of the class's types used: its first type")
end)

case("class lines reorder within a tier: a type with free GPUs stays before one the account waits for", function()
	load("acct_a k80:4:4|v100:2\nacct_a/cnn v100,k80\n")
	local job = { account = "acct_a", name = "cnn", tres_per_node = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:k80:1", "k80 (tier 0) before v100 (tier 1)")
	load("acct_a k80:4:4,v100:2:2\nacct_a/cnn v100,k80\n")
	job = { account = "acct_a", name = "cnn", tres_per_node = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_node, "gres:gpu:v100:1", "one tier: the class's order")
end)

case("'*/CLASS' lines order a class in every account without its own line", function()
	load("acct_a v100:4,k80:4\nacct_b v100:4,k80:4\n*/rl k80,v100\nacct_b/rl v100\n* k80\n")
	local function typ(acct)
		local job = { account = acct, name = "rl", tres_per_node = "gres:gpu:1" }
		submit(job)
		return job.tres_per_node
	end
	eq(typ("acct_a"), "gres:gpu:k80:1", "the site-wide class line")
	eq(typ("acct_b"), "gres:gpu:v100:1", "the account's own class line wins")
end)

case("the @classes line sets where the class is read; bad sources and names break the map", function()
	load("@classes name\nacct_a v100:8,k80:8\nacct_a/rl k80\n")
	local job = { account = "acct_a", comment = "class=rl", name = "cnn", tres_per_job = "gres:gpu:1" }
	submit(job)
	eq(job.tres_per_job, "gres:gpu:v100:1", "only the name counts: class cnn, no line")
	for _, bad in ipairs({ "@classes comment,label\nacct_a v100\n", "acct_a/r:l v100\n", "acct_a/ v100\n" }) do
		load(bad)
		local j = { account = "acct_a", tres_per_job = "gres:gpu:1" }
		eq(submit(j), slurm.SUCCESS, "broken map: " .. bad)
		eq(j.tres_per_job, "gres:gpu:1", "broken map leaves the job: " .. bad)
		has(slurm.user, "the GPU type map is broken")
	end
end)

case("internal error under pcall: the job passes unchanged, logged", function()
	load(MAP)
	slurm_fair_submit.read_map = function() error("injected bug") end
	local job = { account = "acct_a", tres_per_job = "gres:gpu:1" }
	eq(submit(job), slurm.SUCCESS, "rc")
	eq(job.tres_per_job, "gres:gpu:1", "unchanged")
	has(slurm.user, "job_submit.lua internal error")
	has(slurm.err, "injected bug", "ctld log")
	eq(submit({ account = "acct_a" }), slurm.SUCCESS, "non-GPU job passes")
	eq(submit({ account = "acct_a", tres_per_job = "gres:gpu:k80:1" }), slurm.SUCCESS, "typed job passes")
end)

case("internal error while reading the request: every job passes", function()
	load(MAP)
	slurm_fair_submit.untyped_fields = function() error("injected bug") end
	eq(submit({ account = "acct_a", tres_per_job = "gres:gpu:1" }), slurm.SUCCESS, "GPU job")
	eq(submit({ account = "acct_a", tres_per_task = "cpu=2" }), slurm.SUCCESS, "non-GPU job")
end)

case("slurm_job_modify passes everything unchanged", function()
	load(MAP)
	local desc = { tres_per_node = "gres:gpu:2" }
	eq(slurm_job_modify(desc, { account = "acct_a" }, {}, 0), slurm.SUCCESS, "rc")
	eq(desc.tres_per_node, "gres:gpu:2")
	eq(desc.comment, nil)
end)

case("script folder found from the loaded file", function()
	local dir = load(MAP)
	eq(slurm_fair_submit.map_path(), dir .. "/gpu_type_map.txt")
end)

H.finish()
