-- Offline tests of job_submit.lua's indexed type map (issue 40 item 4): the daemon's map carries `#@map ID T`
-- (ID: the hash of its content), its fresh lines (`#@expires`, `#@soon`), then `#@index G I N`, G bytes of head,
-- I bytes of `#@at ACCOUNT OFFSET LENGTH` lines and the accounts' sections. The script parses the head once per
-- content and an account's section the first time one of its jobs needs it; a publication of the same content
-- (a poll) is read from its fresh lines alone; a corrupt index fails open.
-- Run: lua5.1 tests/lua/test_map_index.lua [path/to/job_submit.lua]   (from the repository root)

local SCRIPT = arg[1] or "etc/job_submit.lua"
local H = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/harness.lua")
local read, write, case, eq, has = H.read, H.write, H.case, H.eq, H.has
local SOURCE = read(SCRIPT)

local function load(map_text)
	return H.load(SOURCE, map_text)
end

-- An indexed map as slurm_fair/daemon/type_map_file.py lays it out: `first` line, `fresh` lines, the index line,
-- the head lines, one `#@at` line per section and the sections ({account, {lines}}, in order). `fix(n)` may
-- change each computed number (offset, lengths) to corrupt the index.
local function indexed(first, fresh, head, sections, fix)
	fix = fix or function(_, v) return v end
	local head_text = table.concat(head, "\n") .. "\n"
	local index, body, at = {}, {}, 0
	for _, s in ipairs(sections) do
		local block = table.concat(s[2], "\n") .. "\n"
		index[#index + 1] = string.format("#@at %s %d %d", s[1], fix("off " .. s[1], at), fix("len " .. s[1], #block))
		body[#body + 1] = block
		at = at + #block
	end
	local index_text = #index > 0 and (table.concat(index, "\n") .. "\n") or ""
	local lines = { first }
	for _, l in ipairs(fresh) do
		lines[#lines + 1] = l
	end
	lines[#lines + 1] = string.format("#@index %d %d %d", fix("G", #head_text), fix("I", #index_text), #index)
	return table.concat(lines, "\n") .. "\n" .. head_text .. index_text .. table.concat(body)
end

local HEAD = { "# slurm-fair GPU type map", "@classes comment,wckey,name", "#@partition gpu a100,k80,v100",
	"* k80:4 free", "*/rl k80,v100", "#@types a100,k80,v100" }
local SECTIONS = {
	{ "acct_a", { "acct_a a100:1,v100:2 room", "#@untyped acct_a 1", "acct_a/cnn v100,a100:0",
		"#@speed acct_a/cnn v100:1000,a100:300" } },
	{ "acct.b-1", { "acct.b-1 v100:3 room of b" } },
	{ "acct_c", { "acct_c a100:2 c" } },
}
local function map_v(id, t, expires)
	return indexed(string.format("#@map %s %d", id, t), { "#@expires " .. expires, "#@soon v100 1:0" }, HEAD, SECTIONS)
end

local PARTS = { gpu = { flag_default = 1 } }
local function typed(account, comment)
	local job = { account = account, tres_per_node = "gres:gpu:1", comment = comment }
	eq(slurm_job_submit(job, PARTS, 1000), slurm.SUCCESS, "rc")
	return job.tres_per_node
end

local function counting()
	local sf = slurm_fair_submit
	local real, n = sf.parse_map, { 0 }
	sf.parse_map = function(text)
		n[1] = n[1] + 1
		return real(text)
	end
	return n
end

-- the same map without its index: every line parsed, as a map of an older daemon is read
local function whole(text)
	return (text:gsub("#@index [^\n]*\n", ""))
end

case("an indexed map types every job as the same map read whole", function()
	local text = map_v("h1", 1000, 4000000000)
	local jobs = { { "acct_a" }, { "acct_a", "class=cnn" }, { "acct_a" }, { "acct_a" }, { "acct.b-1" },
		{ "acct_c" }, { "acct_none" }, { "acct_none", "class=rl" }, { "acctXb-1" }, { "acct_c" } }
	local got = {}
	for _, form in ipairs({ text, whole(text) }) do
		load(form)
		slurm_fair_submit.clock = function() return 2000 end
		local out = {}
		for _, j in ipairs(jobs) do
			out[#out + 1] = typed(j[1], j[2])
		end
		got[#got + 1] = table.concat(out, " ")
		eq(#slurm.err, 0, "no error logged")
	end
	eq(got[1], got[2], "indexed vs whole")
	-- rooms: a100:1 then v100 x2 (cnn orders v100 first), then untyped room 1; b: v100; c: a100; others: '*'
	eq(got[1], "gres:gpu:a100:1 gres:gpu:v100:1 gres:gpu:v100:1 gres:gpu:1 gres:gpu:v100:1 gres:gpu:a100:1 "
		.. "gres:gpu:k80:1 gres:gpu:k80:1 gres:gpu:k80:1 gres:gpu:a100:1", "types")
end)

case("only the head and the submitting account's section are parsed, once per content", function()
	local dir = load(map_v("h1", 1000, 4000000000))
	local n = counting()
	slurm_fair_submit.clock = function() return 2000 end
	typed("acct_c")
	eq(n[1], 3, "head, fresh lines, acct_c's section")
	typed("acct_c")
	typed("acct_none")
	eq(n[1], 3, "cached; an account without a section parses nothing")
	eq(slurm_fair_submit.cache.map.entries["acct_a"], nil, "acct_a's section not read")
	typed("acct_a")
	eq(n[1], 4, "acct_a's section, once")
	-- a poll: the same content (ID) from a later snapshot, with a later expiry
	write(dir .. "/gpu_type_map.txt", map_v("h1", 1010, 4000000010))
	typed("acct_a")
	typed("acct_c")
	eq(n[1], 5, "only the fresh lines read again")
	eq(slurm_fair_submit.cache.map.expires, 4000000010, "the new expiry")
	eq(slurm_fair_submit.cache.map.taken_at, 1010, "the new snapshot time")
	-- new content: a new ID
	write(dir .. "/gpu_type_map.txt", map_v("h2", 1020, 4000000020))
	typed("acct_c")
	eq(n[1], 8, "head, fresh lines and the section again")
end)

case("a poll of the same content keeps the map fresh: staleness by the fresh #@expires", function()
	local dir = load(map_v("h1", 1000, 1900))
	slurm_fair_submit.clock = function() return 1901 end
	eq(typed("acct_c"), "gres:gpu:1", "stale: left as it is")
	has(slurm.user, "is stale")
	write(dir .. "/gpu_type_map.txt", map_v("h1", 1890, 2800)) -- the next poll: same ID, new expiry
	eq(typed("acct_c"), "gres:gpu:a100:1", "fresh again, without a new ID")
end)

case("the rooms spent count per snapshot time (T), also under one ID", function()
	local dir = load(map_v("h1", 1000, 4000000000))
	slurm_fair_submit.clock = function() return 1500 end
	eq(typed("acct_c"), "gres:gpu:a100:1", "room 2")
	eq(typed("acct_c"), "gres:gpu:a100:1", "room 1")
	eq(typed("acct_c"), "gres:gpu:a100:1", "no room: the first type")
	write(dir .. "/gpu_type_map.txt", map_v("h1", 2000, 4000000000)) -- a later snapshot: it sees those jobs
	eq(typed("acct_c"), "gres:gpu:a100:1", "unspent again")
	eq(typed("acct_c"), "gres:gpu:a100:1", "1 left")
	eq(typed("acct_c"), "gres:gpu:a100:1", "no room again: the first type")
	eq(slurm_fair_submit.state.spent.acct_c.a100, 3, "3 against the later snapshot")
end)

local function broken_for(account, text, why)
	load(text)
	slurm_fair_submit.clock = function() return 2000 end
	local job = { account = account, tres_per_node = "gres:gpu:1", comment = "mine" }
	eq(slurm_job_submit(job, PARTS, 1000), slurm.SUCCESS, "rc")
	eq(job.tres_per_node, "gres:gpu:1", "left as it is")
	eq(job.comment, "mine", "comment as it was")
	has(slurm.user, "the GPU type map is broken")
	has(slurm.err, why)
end

local CORRUPT = {
	{ "an index line that is not one", function(t) return (t:gsub("#@index %d+ %d+ %d+", "#@index x 2")) end,
		"bad index line" },
	{ "an index longer than the file", function()
		return indexed("#@map h9 1000", {}, HEAD, SECTIONS, function(k, v) return k == "I" and v + 100000 or v end)
	end, "more bytes than the file has" },
	{ "a head length off by some bytes", function()
		return indexed("#@map h9 1000", {}, HEAD, SECTIONS, function(k, v) return k == "G" and v - 3 or v end)
	end, "does not match the file" },
	{ "a section offset into another account's section", function()
		return indexed("#@map h9 1000", {}, HEAD, SECTIONS, function(k, v) return k == "off acct_a" and 100 or v end)
	end, "the section of account 'acct_a'" },
	{ "a section offset past the end", function()
		return indexed("#@map h9 1000", {}, HEAD, SECTIONS, function(k, v) return k == "off acct_a" and 99999 or v end)
	end, "is not where its index says" },
	{ "a section length one byte short", function()
		return indexed("#@map h9 1000", {}, HEAD, SECTIONS, function(k, v) return k == "len acct_a" and v - 1 or v end)
	end, "is not where its index says" },
	{ "a bad line in the account's section", function()
		return indexed("#@map h9 1000", {}, HEAD, { { "acct_a", { "acct_a v100:x" } } })
	end, "bad GPU type 'v100:x'" },
	{ "a bad line in the head", function()
		return indexed("#@map h9 1000", {}, { "@classes bogus" }, SECTIONS)
	end, "unknown class source 'bogus'" },
	{ "random bytes after the index line", function(t)
		return (t:gsub("\n(# slurm%-fair GPU type map)", "\n\1\2\255garbage %1"))
	end, "does not match the file" },
}
for _, c in ipairs(CORRUPT) do
	case("corrupt index, fails open: " .. c[1], function()
		broken_for("acct_a", c[2](map_v("h1", 1000, 4000000000)), c[3])
	end)
end

case("a corrupt section breaks only its account's jobs, and stays cached as broken", function()
	local text = indexed("#@map h9 1000", {}, HEAD, SECTIONS, function(k, v) return k == "off acct_a" and 100 or v end)
	load(text)
	slurm_fair_submit.clock = function() return 2000 end
	eq(typed("acct_a"), "gres:gpu:1", "acct_a: left as it is")
	local n = counting()
	eq(typed("acct_a"), "gres:gpu:1", "again")
	eq(n[1], 0, "the section is not read again for the same map")
	eq(typed("acct_c"), "gres:gpu:a100:1", "acct_c still typed")
	eq(typed("acct_none"), "gres:gpu:k80:1", "the '*' line still applies")
end)

case("an older map (#@map first, no index) is read whole, as before", function()
	local old = "#@map 3f9a01bc-7 1000\n# slurm-fair GPU type map\n#@expires 4000000000\n@classes comment\n"
		.. "acct_a v100:2 room\n* k80:4 free\n"
	load(old)
	local n = counting()
	eq(typed("acct_a"), "gres:gpu:v100:1", "acct_a")
	eq(typed("acct_x"), "gres:gpu:k80:1", "default")
	eq(n[1], 1, "parsed once, whole")
end)

H.finish()
