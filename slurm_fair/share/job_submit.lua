--[[
slurm-fair job_submit.lua: gives untyped GPU requests the GPU type slurm-fair planned for the account.

Slurm does not count an untyped request (--gres=gpu:1, --gpus=1, --gpus-per-task=1, ...) against typed
GrpTRES=gres/gpu:<type>=N limits (checked on 22.05 and 24.11). This script types such requests at
submission, so the per-type limits slurm-fair sets hold for every GPU job.

Rules:
  * The map is `gpu_type_map.txt` in this script's folder. slurm-fair's daemon writes it each round (config
    [submit] type_map). It is parsed once per change and kept in the Lua state (SF.cache): a map whose first
    line is `#@map ID [T]` (every map the daemon writes) is keyed by that line and the file's size, so an
    untyped submission reads one line of it; any other map is keyed by its whole text. The daemon's map has an
    index (`#@index`, `#@at` lines; SF.read_map): only its head and the submitting account's section are
    parsed, and a publication of the same content (same ID) only has its fresh lines read again. Lines: `ACCOUNT TYPES [REASON...]`; `* TYPES [REASON]`
    is the default for accounts without a line; `#` starts a comment line; blank lines are ignored. TYPES is
    `TYPE` or a comma-separated list `TYPE:ROOM[:BLOCK],...` in the order to use them (ROOM: how many GPUs
    of that type the account's untyped jobs may be given until the map changes; BLOCK: the largest job, in
    GPUs, that fits that type's free GPUs now; none = no bound); a `|` instead of a `,` starts the next tier
    (types with free GPUs come before types the account waits for).
  * Job classes: `ACCOUNT/CLASS TYPE[:0],TYPE,...` lines (`:0`: the class runs there at under half its best
    speed, so a job of the class is never left untyped where it could land there) give the order in which a class of that account tries the
    types of its account's line within each tier (fastest for the class first; a type left out is not used
    for it; rooms stay the account's); `*/CLASS` lines do so for the class in every account without a line of its own. The job's class is found as slurm-fair finds it, from the sources named by the
    `@classes comment,wckey,name` line (default that order): a `class=NAME` token in the comment, the wckey,
    the job name. A class without a line uses its account's order.
  * Spreading a burst: the script counts, per account and type, the GPUs it has handed out against the map
    it read (a global table: slurmctld keeps the script's Lua state between submissions and reloads it only
    when the script file changes). The map's identity is its `#@map ID T` line (ID: the hash of the map's content;
    T: the time of the snapshot it was computed from, new with every publication: each poll, a new daemon),
    else its text: a map with another identity starts with nothing spent, even if its content is one spent
    against before — but for the GPUs handed out since its snapshot was taken (T in unix seconds, less SF.SKEW =
    3 s): that snapshot did not see those jobs. A job gets the first type of its
    line whose room is not used up by those counts (a job of N GPUs needs N left, and N at most the type's
    BLOCK; on a type with a BLOCK, i.e. free room, also what every account was handed out there within the
    map's `#@free TYPE:N,...` GPUs idle for everyone, so two accounts' free rooms on the same idle GPUs do not
    add up). When none has room: if the map grants the account `#@untyped ACCOUNT N` room left for the job
    (and the job's class runs on every type), the request stays untyped (Slurm gives it whichever type frees
    first; the account's total gres/gpu limit binds it); otherwise the type of its line the map's `#@soon` rows
    expect to start a job of its size first (the daemon's backfill plan of the queue, jobs ending by their
    class's recorded run times, at most their time limits), else the first type (the job waits there; the
    daemon publishes new room as GPUs free up).
  * A GPU entry without a type in tres_per_node / tres_per_job / tres_per_task / tres_per_socket gets the
    chosen type (account = job_desc.account or job_desc.default_account), keeping the prefix it was
    written with (22.05 `gres:gpu:2` -> `gres:gpu:v100:2`; 24.11 `gres/gpu:2` -> `gres/gpu:v100:2`,
    `gres/gpu=1` -> `gres/gpu:v100:1`). The comment gets the token `fair:flex` (the user's comment is kept);
    the user is told the type and why on stderr.
  * Typed GPU requests, requests for 0 GPUs and non-GPU jobs are never changed.
  * Fails open, always: the script never rejects a job. No map file (the daemon never ran); a map that cannot
    be read, is empty, is not a map (a bad line: garbage bytes, a bad name); no line for the account and no
    `*` line; a stale map (`#@expires EPOCH`, written by the daemon: the publication time plus [submit]
    max_age; past it the daemon has stopped publishing): the job passes unchanged, with a note to the user and
    in slurmctld's log. An internal error (a bug here, under pcall): logged, the fields the script may edit put
    back, the job passes.
  * A job that names --constraint, --nodelist or --exclude (job_desc features, req_nodes, exc_nodes) is left
    alone, with a note: a type picked without reading node features and names could contradict them.
  * slurm_job_modify changes nothing (scontrol update of a pending job passes unchanged; on 22.05 changing a
    pending job's GPU type is broken, Slurm bug 17184).
  * Partitions: with `#@partition NAME TYPE,...` lines in the map (comments to older scripts), a job is typed
    only among its partitions' types: `-p a,b` their union; no -p, the partition part_list flags as default
    (several flagged: the types all have). None fits, or no partition known: the job passes untyped, a note.
  * Module: a site's own job_submit.lua may load this file once at its top (`local sf =
    dofile("/etc/slurm/slurm_fair_submit.lua")`, or `require`) and call sf.job_submit(job_desc, part_list,
    submit_uid) and sf.job_modify(job_desc, job_rec, part_list, modify_uid) from its own functions (see
    job_submit_site_example.lua). Loaded by Lua code, it defines no globals and returns its table (sf.map_file
    may name the map). slurmctld reloads only the site's script: touch it after replacing this file.
Check before installing: luac5.1 -p job_submit.lua (a broken script stops slurmctld from starting).
]]

-- Loaded by slurmctld as its job_submit.lua, the chunk is called from C: there is no Lua caller. Loaded by a
-- site's script (dofile, require, loadfile), there is one: then it is a module.
local AS_MODULE = debug.getinfo(2, "S") ~= nil

local SF = {}

SF.MAP_NAME = "gpu_type_map.txt"
SF.FLEX_TOKEN = "fair:flex"
SF.FIELDS = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }
local ENOENT = 2

-- The folder this script was loaded from ("/etc/slurm" if Slurm did not load it from a file).
function SF.script_dir()
	local src = debug.getinfo(1, "S").source or ""
	if src:sub(1, 1) == "@" then
		local dir = src:sub(2):match("^(.*)/[^/]*$")
		if dir and dir ~= "" then
			return dir
		end
	end
	return "/etc/slurm"
end

SF.map_file = nil -- a site loading this as a module may set another path for the map

function SF.map_path()
	return SF.map_file or (SF.script_dir() .. "/" .. SF.MAP_NAME)
end

local function trim(s)
	return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function valid_name(s)
	return s ~= nil and s:match("^[%w_.%-]+$") ~= nil
end

-- Parse the TYPES field: `TYPE` or `TYPE:ROOM[:BLOCK],...`, `|` instead of `,` starting the next tier.
-- Returns a list of {type=, room=, block= (nil: no bound), tier=} or nil, problem.
function SF.parse_types(field)
	local list = {}
	local tier = 0
	for item, sep in (field .. ","):gmatch("([^,|]*)([,|])") do
		local gtype, room, block = item:match("^([^:]+):(%d+):(%d+)$")
		if not gtype then
			gtype, room = item:match("^([^:]+):(%d+)$")
		end
		if not gtype then
			gtype = item
		end
		if not valid_name(gtype) or gtype:match("^%d+$") then
			return nil, string.format("bad GPU type '%s'", gtype)
		end
		list[#list + 1] = { type = gtype, room = room and tonumber(room) or nil, block = block and tonumber(block) or nil,
			tier = tier }
		if sep == "|" then
			tier = tier + 1
		end
	end
	return list
end

SF.CLASS_SOURCES = { comment = true, wckey = true, name = true }

-- Parse a `#@partition NAME TYPE,...` line. Returns name, {type -> true} or nil, problem.
local function parse_partition(line)
	local name, field = line:match("^#@partition%s+(%S+)%s+(%S+)$")
	local list, err = nil, nil
	if name and valid_name(name) then
		list, err = SF.parse_types(field)
	end
	if not list then
		return nil, err or string.format("expected '#@partition NAME TYPE,...', got '%s'", line)
	end
	local types = {}
	for _, t in ipairs(list) do
		types[t.type] = true
	end
	return name, types
end

-- Parse the map text. Returns {entries = {account -> {types=, type=, reason=}}, default = (the same) or nil,
-- classes = {"account/class" -> {type, ...}}, order = {source, ...}, partitions = {name -> {type -> true}},
-- partitioned = (the map has partition lines), listed_only = true|nil, id = (`#@map ID`) or nil,
-- untyped = {account -> GPUs}} or nil, "line N: problem". `type` is the first of `types`. `#@listed-only` (a
-- pilot): accounts without a line are left alone. Directives start with `#@` so that a script older than the
-- map reads them as comments; a malformed `#@map` or `#@untyped` line is read as a comment too (no identity:
-- the text is; no untyped room).
function SF.parse_map(text)
	local map = { entries = {}, default = nil, types = {}, classes = {}, order = { "comment", "wckey", "name" },
		partitions = {}, partitioned = false, untyped = {}, slow = {} }
	local n = 0
	for line in (text .. "\n"):gmatch("([^\n]*)\n") do
		n = n + 1
		line = trim(line:gsub("\r$", ""))
		local directive = line:match("^@classes%s+(%S+)$")
		if line == "#@partition" or line:match("^#@partition%s") then
			local name, types = parse_partition(line)
			if not name then
				return nil, string.format("line %d: %s", n, types)
			end
			if map.partitions[name] then
				return nil, string.format("line %d: second line for partition '%s'", n, name)
			end
			map.partitions[name] = types
			map.partitioned = true
		elseif directive then
			map.order = {}
			for src in directive:gmatch("[^,]+") do
				if not SF.CLASS_SOURCES[src] then
					return nil, string.format("line %d: unknown class source '%s'", n, src)
				end
				map.order[#map.order + 1] = src
			end
		elseif line:match("^#@map%s+[%w_.%-]+$") or line:match("^#@map%s+[%w_.%-]+%s+%d+$") then
			local id, taken = line:match("^#@map%s+(%S+)%s*(%d*)$")
			map.id, map.taken_at = id, tonumber(taken)
		elseif line:match("^#@expires%s+%d+$") then
			map.expires = tonumber(line:match("^#@expires%s+(%d+)$"))
		elseif line:match("^#@free%s+%S+$") then
			local list = SF.parse_types(line:match("^#@free%s+(%S+)$"))
			for _, t in ipairs(list or {}) do
				if t.room then
					map.free = map.free or {}
					map.free[t.type] = t.room
				end
			end
		elseif line:match("^#@soon%s+[%w_.%-]+%s+%S+$") then
			local gtype, field = line:match("^#@soon%s+(%S+)%s+(%S+)$")
			local row = {}
			for size, at in field:gmatch("(%d+):(%d+)") do
				row[#row + 1] = { size = tonumber(size), at = tonumber(at) }
			end
			table.sort(row, function(a, b) return a.size < b.size end)
			map.soon = map.soon or {}
			map.soon[gtype] = row
		elseif line:match("^#@speed%s+%S+%s+%S+$") then
			local key, field = line:match("^#@speed%s+(%S+)%s+(%S+)$")
			local speed = {}
			for gtype, pm in field:gmatch("([%w_.%-]+):(%d+)") do
				speed[gtype] = tonumber(pm)
			end
			map.speed = map.speed or {}
			map.speed[key] = speed
		elseif line:match("^#@untyped%s+[%w_.%-]+%s+%d+$") then
			local acct, gpus = line:match("^#@untyped%s+(%S+)%s+(%d+)$")
			map.untyped[acct] = tonumber(gpus)
		elseif line:match("^#@types%s+%S+$") then
			for gtype in line:match("^#@types%s+(%S+)$"):gmatch("[^,]+") do
				map.types[gtype] = true -- every type of the map's account lines (those are read when needed)
			end
		elseif line == "#@listed-only" then
			map.listed_only = true -- a pilot: accounts without a line are not slurm-fair's to type
		elseif line ~= "" and line:sub(1, 1) ~= "#" then
			local acct, field, rest = line:match("^(%S+)%s+(%S+)%s*(.*)$")
			if not acct then
				return nil, string.format("line %d: expected 'ACCOUNT TYPES [REASON]', got '%s'", n, line)
			end
			local cacct, cls = acct:match("^([^/]+)/([^/]+)$")
			if cacct then
				if (cacct ~= "*" and not valid_name(cacct)) or not valid_name(cls) then
					return nil, string.format("line %d: bad account/class '%s'", n, acct)
				end
				local list, terr = SF.parse_types(field)
				if not list then
					return nil, string.format("line %d: %s", n, terr)
				end
				local order, slow = {}, {}
				for _, t in ipairs(list) do
					order[#order + 1] = t.type
					if t.room == 0 then
						slow[t.type] = true -- `TYPE:0`: the class runs there at under half its best speed
					end
				end
				map.classes[acct] = order
				map.slow[acct] = slow
				acct = nil
			end
			if acct and acct ~= "*" and not valid_name(acct) then
				return nil, string.format("line %d: bad account name '%s'", n, acct)
			end
			local list, terr = nil, nil
			if acct then
				list, terr = SF.parse_types(field)
				if not list then
					return nil, string.format("line %d: %s", n, terr)
				end
			end
			local gtype = list and list[1].type
			local e = acct and { type = gtype, types = list, reason = rest ~= "" and rest or nil }
			if not acct then
				-- a class line: nothing more
			elseif acct == "*" then
				if map.default then
					return nil, string.format("line %d: second '*' line", n)
				end
				map.default = e
			else
				if map.entries[acct] then
					return nil, string.format("line %d: second line for account '%s'", n, acct)
				end
				map.entries[acct] = e
			end
			for _, t in ipairs(list or {}) do
				map.types[t.type] = true
			end
		end
	end
	return map
end

-- GPUs handed out per account and type against the map with identity `ident` (its `#@map ID T`, else its text;
-- kept between submissions: the Lua state lives as long as slurmctld does not reload the script). The key
-- SF.UNTYPED counts the GPUs left untyped under the account's `#@untyped` room. `log` lists what was handed out
-- and when ({t, key, type, gpus}): a new map whose snapshot was taken at T (`#@map ID T`) has not seen what was
-- handed out from T on, so that still counts against it.
SF.state = { ident = nil, spent = {}, log = {} }
SF.UNTYPED = "#untyped"
SF.ALL = "#all" -- the line key under which every account's GPUs per type are counted (against `#@free`)
SF.SKEW = 3 -- seconds: T is when the snapshot was complete (its squeue ran up to a few seconds before), rounded down
SF.LOG_MAX = 4096 -- entries kept (the oldest half is dropped past it: a map that old is long replaced)
SF.clock = os.time

-- The identity rooms are spent against: the map's `#@map ID` line, else (a map without one) its text.
function SF.map_identity(map)
	if map.id then
		return "#@map " .. map.id .. " " .. tostring(map.taken_at)
	end
	return map.text
end

-- The GPUs a job asks for in all (its untyped GPU entries; per node x nodes, per task x tasks). A field Slurm
-- left unset (nil, 0, or NO_VAL) counts as 1.
local function count_of(v)
	v = tonumber(v)
	if v == nil or v < 1 or v >= 0xfffffffe then
		return 1
	end
	return v
end

function SF.job_gpus(job_desc)
	local total = 0
	for _, name in ipairs(SF.FIELDS) do
		local v = job_desc[name]
		if type(v) == "string" then
			for entry in v:gmatch("[^,]+") do
				local prefix, count = SF.untyped_gpu(entry)
				if prefix then
					local n = count and tonumber(count) or 1
					if name == "tres_per_node" then
						n = n * count_of(job_desc.min_nodes)
					elseif name == "tres_per_task" then
						n = n * count_of(job_desc.num_tasks)
					end
					total = total + n
				end
			end
		end
	end
	return math.max(total, 1)
end

-- The job's class as slurm-fair finds it (sources in `order`); nil when none names one.
function SF.job_class(job_desc, order)
	for _, src in ipairs(order) do
		if src == "comment" then
			local c = " " .. tostring(job_desc.comment or "")
			local cls = c:match("[%s,;]class=([^%s,;]+)")
			if cls then
				return cls
			end
		elseif src == "wckey" then
			local wk = tostring(job_desc.wckey or ""):gsub("^%*", "")
			if wk ~= "" then
				return wk
			end
		elseif src == "name" then
			local name = job_desc.name
			if type(name) == "string" and name ~= "" then
				return name
			end
		end
	end
	return nil
end

-- The entry's types in the class's order (its class line) within each tier of the entry, those the class
-- line leaves out dropped; the entry itself when the class has no line or the line keeps none of them.
function SF.for_class(entry, class_order)
	if not class_order then
		return entry
	end
	local by_type = {}
	for _, t in ipairs(entry.types or { { type = entry.type } }) do
		by_type[t.type] = t
	end
	local list, rank = {}, {}
	for i, name in ipairs(class_order) do
		if by_type[name] then
			list[#list + 1] = by_type[name]
			rank[name] = i
		end
	end
	if #list == 0 then
		return entry
	end
	table.sort(list, function(x, y)
		if (x.tier or 0) ~= (y.tier or 0) then
			return (x.tier or 0) < (y.tier or 0)
		end
		return rank[x.type] < rank[y.type]
	end)
	return { type = list[1].type, types = list, reason = entry.reason }
end

-- The partitions a job is submitted to: job_desc.partition ("a" or "a,b"; returns names, false), else those
-- part_list (the partitions the user may use, keyed by name) flags as the default (returns names, true); nil
-- when neither names one. After `scontrol update PartitionName=X Default=YES` the old default keeps its flag
-- for a while (Slurm clears it when it next saves or sends partition state): then several are flagged.
function SF.job_partitions(job_desc, part_list)
	local names = {}
	local given = job_desc.partition
	if type(given) == "string" and given ~= "" then
		for name in given:gmatch("[^,]+") do
			names[#names + 1] = trim(name)
		end
		return names, false
	end
	for key, part in pairs(type(part_list) == "table" and part_list or {}) do
		if tonumber(part.flag_default) == 1 then
			names[#names + 1] = type(key) == "string" and key or tostring(part.name)
		end
	end
	table.sort(names)
	return #names > 0 and names or nil, true
end

-- The entry with only the types in `allowed` ({type -> true}), in its order and tiers; nil when none is.
function SF.within(entry, allowed)
	local list = {}
	for _, t in ipairs(entry.types or { { type = entry.type } }) do
		if allowed[t.type] then
			list[#list + 1] = t
		end
	end
	if #list == 0 then
		return nil
	end
	return { type = list[1].type, types = list, reason = entry.reason }
end

-- The GPU types of the partitions `names` ({type -> true}) from the map's partition lines: their union (a job
-- submitted to several may run in any), or with `every` the types all of them have (of several partitions
-- flagged default only one is the default: a type they all have is in it).
function SF.partition_types(map, names, every)
	local allowed = {}
	for i, name in ipairs(names) do
		local types, add = map.partitions[name] or {}, i == 1 or not every
		for gtype in pairs(add and types or allowed) do
			allowed[gtype] = add or types[gtype] -- (every: clearing a field while traversing is allowed)
		end
	end
	return allowed
end

-- The entry with only the types of the job's partitions (map with partition lines); nil, why when none is left.
function SF.in_partitions(map, entry, job_desc, part_list, account)
	local parts, default = SF.job_partitions(job_desc, part_list)
	if not parts then
		return nil, "the job names no partition and none is the default"
	end
	local allowed = SF.partition_types(map, parts, default)
	local kept = SF.within(entry, allowed)
	if kept then
		return kept, nil, allowed
	end
	local where = (default and "default partition " or "partition ") .. table.concat(parts, ",")
	if next(allowed) == nil then
		return nil, where .. (default and #parts > 1 and " (all flagged) have no GPU type in common in the map"
			or " has no GPU type in the map")
	end
	local mine, have = {}, {}
	for _, t in ipairs(entry.types or { { type = entry.type } }) do
		mine[#mine + 1] = t.type
	end
	for gtype in pairs(allowed) do
		have[#have + 1] = gtype
	end
	table.sort(have)
	return nil, string.format("none of the types for account %s (%s) is in %s (%s)", tostring(account),
		table.concat(mine, ","), where, table.concat(have, ","))
end

-- Pick the type for a job of `gpus` GPUs of `account` from its map entry (module comment) against the map
-- with identity `ident` (SF.map_identity); counts it. `loose`: the account's `#@untyped` room for this job (nil:
-- none). `pool`: the map's `#@free` GPUs per type: a free-room entry (one with a BLOCK) is taken only while
-- every account's GPUs handed out there stay within it (nil: no bound). A new identity starts unspent, but for what was handed out since `taken_at` (the new map's snapshot
-- time, `#@map ID T`; nil: nothing carries over): its snapshot did not see those jobs. Returns type, note (nil,
-- or why the type was taken without room); or nil, note when the job stays untyped. No type has room and the job
-- is not left untyped: the type `soon` (the map's `#@soon` rows) expects to start it first (SF.first_start; types
-- in `slow`, the class line's `TYPE:0`, only when no other type has a start), else the entry's first type.
function SF.choose(ident, account, entry, gpus, loose, taken_at, pool, prefer, soon, slow)
	local now = SF.clock()
	if SF.state.ident ~= ident then
		local old = SF.state.log
		SF.state = { ident = ident, spent = {}, log = {} }
		for _, e in ipairs(taken_at and old or {}) do -- handed out after the new map's snapshot: still counts
			if e.t >= taken_at - SF.SKEW then
				SF.spend(e.key, e.type, e.gpus, e.t)
			end
		end
	end
	local key = account or "*"
	local spent = SF.state.spent[key] or {}
	local all = SF.state.spent[SF.ALL] or {}
	local pick, note = nil, nil
	for _, t in ipairs(entry.types or { { type = entry.type } }) do
		local shared = t.block == nil or pool == nil or pool[t.type] == nil or (all[t.type] or 0) + gpus <= pool[t.type]
		if (t.room == nil or (spent[t.type] or 0) + gpus <= t.room) and (t.block == nil or gpus <= t.block)
			and shared then
			pick = t.type
			break
		end
	end
	if pick and prefer then
		local alt, why = prefer(pick, gpus, function(t) -- idle now for this job, after what this map handed out
			return pool ~= nil and pool[t] ~= nil and (all[t] or 0) + gpus <= pool[t]
		end)
		if alt then
			pick, note = alt, why
		end
	end
	if not pick and loose and (spent[SF.UNTYPED] or 0) + gpus <= loose then
		SF.spend(key, SF.UNTYPED, gpus, now)
		return nil, string.format("no GPU type has room for %d GPU(s) now; left untyped: it starts on the first "
			.. "type that frees, within the account's total GPU limit", gpus)
	end
	if not pick then
		local idle = function(t)
			return pool ~= nil and pool[t] ~= nil and (all[t] or 0) + gpus <= pool[t]
		end
		local first, wait = SF.first_start(soon, entry, gpus, now, idle, slow)
		if not first and slow then
			first, wait = SF.first_start(soon, entry, gpus, now, idle)
		end
		if first then
			pick = first
			note = string.format("no GPU type has room for %d GPU(s) now; %s is expected to start it first (in "
				.. "about %d s: backfill's plan, jobs ending by their class's recorded run times, at most their "
				.. "time limits)", gpus, first, wait)
		else
			pick = entry.type
			note = "every type's room in the map is used by earlier submissions; waits for " .. pick
		end
	end
	SF.spend(key, pick, gpus, now)
	return pick, note
end

-- The type of `entry` (in its order) that `soon` (the map's `#@soon` rows, nil: none) expects to start a job of
-- `gpus` GPUs first: the first row entry of at least that size, seconds from `now`; the first of equal ones. A
-- start now counts only where `idle(t)` (the map's `#@free` GPUs less what this map handed out) still has room for
-- the job: earlier submissions took those GPUs, and when it starts there is not known. `slow` (nil: none): types
-- left out (the job's class line's `TYPE:0`; the caller tries again without it when none is left). Returns type,
-- seconds; nil when no type of the entry has such a row.
function SF.first_start(soon, entry, gpus, now, idle, slow)
	if not soon then
		return nil
	end
	local best, wait = nil, nil
	for _, t in ipairs(entry.types or { { type = entry.type } }) do
		for _, e in ipairs((slow and slow[t.type]) and {} or soon[t.type] or {}) do
			if e.size >= gpus then
				local s = math.max(0, e.at - now)
				if (s > 0 or (idle and idle(t.type))) and (wait == nil or s < wait) then
					best, wait = t.type, s
				end
				break
			end
		end
	end
	return best, wait
end

-- Typing by expected completion (issue 28): `pick`, the type a job of `gpus` GPUs got by room, is kept unless
-- the job's class runs there at under half its best speed (`speed`: the class's `#@speed` line, thousandths
-- of its best, over the types in `allowed` (nil: all) with a `#@soon` line) and another type, faster for the class, is
-- expected to finish it sooner: its expected start (`#@soon`: when a job of at least `gpus` GPUs could start
-- there, as Slurm's backfill plans it; seconds from `now`) plus the job's time limit `limit` (seconds) times
-- the class's speed ratio, against `limit` on `pick` from its own expected start. Without a time limit
-- (`limit` nil) only a faster type that can start it now is taken (the fastest such): it finishes the job
-- sooner whatever its length — now: `#@soon` says so and `idle(t)` (the map's `#@free` GPUs there, less what
-- this map handed out already) still has room for it. Types in name order, the first of equal ones. Returns
-- type, note or nil (keep `pick`).
function SF.by_completion(map, speed, pick, gpus, limit, allowed, now, idle)
	if not (map.soon and speed) or (limit ~= nil and not (limit > 0)) then
		return nil
	end
	local names = {}
	for t, v in pairs(speed) do
		if v > 0 and (allowed == nil or allowed[t]) and map.soon[t] then
			names[#names + 1] = t
		end
	end
	table.sort(names)
	local best = 0
	for _, t in ipairs(names) do
		best = math.max(best, speed[t])
	end
	local sp = speed[pick]
	if not sp or sp <= 0 or sp * 2 >= best then
		return nil
	end
	local function start(t)
		for _, e in ipairs(map.soon[t] or {}) do
			if e.size >= gpus then
				return math.max(0, e.at - now)
			end
		end
		return nil
	end
	local cost, alt, wait = (start(pick) or 0) + (limit or 0), nil, nil
	for _, t in ipairs(names) do
		local s = start(t)
		if t ~= pick and speed[t] > sp and s then
			if limit then
				local c = s + limit * sp / speed[t]
				if c < cost then
					cost, alt, wait = c, t, s
				end
			elseif s == 0 and idle and idle(t) and (not alt or speed[t] > speed[alt]) then
				alt, wait = t, 0
			end
		end
	end
	if not alt then
		return nil
	end
	return alt, string.format("%s runs this class at %d/1000 of its best speed; %s is expected to finish it "
		.. "sooner (a start in about %d s)", pick, sp, alt, wait)
end

-- Count `gpus` handed out on `gtype` (or SF.UNTYPED) for line `key` at time `t`.
function SF.spend(key, gtype, gpus, t)
	local spent = SF.state.spent[key]
	if not spent then
		spent = {}
		SF.state.spent[key] = spent
	end
	spent[gtype] = (spent[gtype] or 0) + gpus
	if gtype ~= SF.UNTYPED then
		local all = SF.state.spent[SF.ALL] or {}
		SF.state.spent[SF.ALL] = all
		all[gtype] = (all[gtype] or 0) + gpus
	end
	local log = SF.state.log
	log[#log + 1] = { t = t, key = key, type = gtype, gpus = gpus }
	if #log > SF.LOG_MAX then
		local keep = {}
		for i = math.floor(#log / 2) + 1, #log do
			keep[#keep + 1] = log[i]
		end
		SF.state.log = keep
	end
end

-- The account's `#@untyped` room for a job of class order `class_order` (nil: none): only for an account with a
-- line of its own, and only when the job's class line (if any) keeps every GPU type of the map that the job
-- may get (`allowed`: its partitions' types, nil = every type) and marks none of them slow (`slow`: its
-- `TYPE:0` entries): Slurm may give an untyped job any of them, whichever frees first.
function SF.loose_room(map, account, class_order, allowed, slow)
	local room = account and map.entries[account] and map.untyped[account]
	if not room or room <= 0 then
		return nil
	end
	if class_order then
		local keeps = {}
		for _, name in ipairs(class_order) do
			keeps[name] = true
		end
		for gtype in pairs(map.types) do
			if (allowed == nil or allowed[gtype]) and (not keeps[gtype] or (slow and slow[gtype])) then
				return nil
			end
		end
	end
	return room
end

-- The map as last read, and the key it was read under (kept between submissions in the Lua state, like
-- SF.state): {path=, key=, text=, bodykey=, map=, kind=, msg=}. A map whose first line is `#@map ID [T]` is
-- keyed by that line and the file's size: a submission reads one line and reads the map again only when it
-- changed. Any other map is keyed by its whole text (read every time, parsed once per change).
--
-- An indexed map (every map the daemon writes: `#@map ID [T]`, its fresh lines `#@expires`/`#@soon`, then
-- `#@index G I N`): after the index line come G bytes of head (the lines every job may need: `@classes`,
-- `#@free`, `#@partition`, `#@listed-only`, `#@types`, the `*` and `*/CLASS` lines), I bytes of index (N lines
-- `#@at ACCOUNT OFFSET LENGTH`), then the accounts' sections (an account's line, its `#@untyped`, its class and
-- `#@speed` lines), at OFFSET bytes from the end of the index. Only the head is parsed when the map changes,
-- and an account's section the first time one of its jobs needs it (SF.load_account). The ID is the hash of
-- everything from the index line on, so a publication with the same content (a poll in which nothing changed)
-- has the same ID: the head and the sections read stay parsed, only the fresh lines are read again.
SF.cache = {}
SF.FRESH_MAX = 1024 -- fresh lines read at most before the index line (past it: a map without an index)

local function parsed(path, key, text)
	local c = SF.cache
	if c.path == path and ((key and c.key == key) or (not key and c.key == nil and c.text == text)) then
		return c
	end
	c = { path = path, key = key, text = key and nil or text }
	if text == nil then
		c.kind, c.msg = "broken", "cannot read " .. path
	elseif not text:match("%S") then
		c.kind, c.msg = "broken", path .. " is empty"
	else
		local map, perr = SF.parse_map(text)
		if map then
			map.text = text
			c.map = map
		else
			c.kind, c.msg = "broken", path .. " " .. perr
		end
	end
	SF.cache = c
	return c
end

-- The fresh lines after the first (`#@expires`, `#@soon`) and the `#@index` line that ends them; nil when the
-- map has no index (a map of an older daemon, or written by hand).
local function fresh_lines(f)
	local lines = {}
	for _ = 1, SF.FRESH_MAX do
		local line = f:read("*l")
		if line == nil then
			return nil
		elseif line:match("^#@index") then
			return lines, line
		elseif not (line:match("^#@expires%s") or line:match("^#@soon%s")) then
			return nil
		end
		lines[#lines + 1] = line
	end
	return nil
end

-- An indexed map (above), `f` just past its index line. Returns map | nil, "broken", message; keeps it in
-- SF.cache. The head and the sections already read are kept while the ID and the sizes stay the same.
local function read_indexed(f, path, key, first, size, fresh, index_line)
	local function broken(msg)
		SF.cache = { path = path, key = key, kind = "broken", msg = path .. ": " .. msg }
		return nil, "broken", SF.cache.msg
	end
	local g, i = index_line:match("^#@index%s+(%d+)%s+(%d+)%s+%d+$")
	if not g then
		return broken("bad index line '" .. index_line .. "'")
	end
	g, i = tonumber(g), tonumber(i)
	local base = f:seek("cur")
	if not base or base + g + i > size then
		return broken("its index line says more bytes than the file has")
	end
	local bodykey = table.concat({ path, first:match("^#@map%s+(%S+)"), g, i, size - base }, "\0")
	local map = SF.cache.bodykey == bodykey and SF.cache.map
	if not map then
		local head = g > 0 and f:read(g) or ""
		local index = i > 0 and f:read(i) or ""
		if #head ~= g or #index ~= i or (i > 0 and index:sub(-1) ~= "\n") then
			return broken("its index line does not match the file")
		end
		local perr
		map, perr = SF.parse_map(head)
		if not map then
			return broken("(head) " .. perr)
		end
		map.index, map.body, map.body_len, map.loaded = "\n" .. index, base + g + i, size - base - g - i, {}
	end
	local fm = SF.parse_map(first .. "\n" .. table.concat(fresh, "\n"))
	if not fm then
		return broken("bad fresh lines")
	end
	map.id, map.taken_at, map.expires, map.soon = fm.id, fm.taken_at, fm.expires, fm.soon
	SF.cache = { path = path, key = key, bodykey = bodykey, map = map }
	return map
end

-- Read account's section of an indexed map into `map` (once: map.loaded[account] is true, or the problem);
-- `f` is the map file open. Returns true | nil, message (a section not where the index says, a line of
-- another account in it, a bad line: the map is broken for this account's jobs). An account without a
-- section (no `#@at` line) has no line: the `*` line is its.
function SF.load_account(f, map, account, path)
	if not map.index or account == nil then
		return true
	end
	local done = map.loaded[account]
	if done then
		return done == true or nil, done
	end
	local off, len = map.index:match("\n#@at " .. account:gsub("%p", "%%%0") .. " (%d+) (%d+)\n")
	if not off then
		map.loaded[account] = true
		return true
	end
	off, len = tonumber(off), tonumber(len)
	local sec, err = nil, nil
	if off + len <= map.body_len and f:seek("set", map.body + off) then
		sec = f:read(len)
	end
	if not sec or #sec ~= len or sec:sub(-1) ~= "\n" then
		err = string.format("%s: the section of account '%s' (%d bytes at %d) is not where its index says", path,
			account, len, off)
	else
		for line in sec:gmatch("([^\n]*)\n") do
			local who = line:match("^#@untyped%s+(%S+)") or line:match("^#@speed%s+([^/%s]+)/")
				or line:match("^([^/%s#]+)[/%s]")
			if who ~= account then
				err = string.format("%s: the section of account '%s' has the line '%s'", path, account, line)
				break
			end
		end
	end
	if not err then
		local sm, perr = SF.parse_map(sec)
		if not sm then
			err = string.format("%s (section of account '%s') %s", path, account, perr)
		else
			for _, t in ipairs({ "entries", "classes", "slow", "untyped", "types" }) do
				for k, v in pairs(sm[t]) do
					map[t][k] = v
				end
			end
			for k, v in pairs(sm.speed or {}) do
				map.speed = map.speed or {}
				map.speed[k] = v
			end
		end
	end
	map.loaded[account] = err or true
	if err then
		return nil, err
	end
	return true
end

-- Read the map (parsed once per change, SF.cache) and, of an indexed map, `account`'s section (nil: none).
-- Returns map | nil, kind ("missing" | "broken"), message.
function SF.read_map(path, account)
	local f, err, code = io.open(path, "r")
	if not f then
		if code == ENOENT then
			return nil, "missing", path .. " does not exist"
		end
		return nil, "broken", "cannot read " .. tostring(err)
	end
	local first, rerr = f:read("*l")
	if first == nil and rerr then
		f:close()
		return nil, "broken", "cannot read " .. path .. ": " .. tostring(rerr)
	end
	local key, text = nil, nil
	if first and first:match("^#@map%s+%S+") then
		local size = f:seek("end")
		key = first .. "\0" .. tostring(size)
		local c, map, kind, msg = SF.cache, nil, nil, nil
		if c.path == path and c.key == key then
			map, kind, msg = c.map, c.kind, c.msg
		else
			f:seek("set", #first + 1)
			local fresh, index_line = fresh_lines(f)
			if index_line then
				map, kind, msg = read_indexed(f, path, key, first, size, fresh, index_line)
			end
		end
		if map then
			local ok, lerr = SF.load_account(f, map, account, path)
			if not ok then
				map, kind, msg = nil, "broken", lerr
			end
		end
		if map or kind then
			f:close()
			return map, kind, msg
		end
	end
	if first ~= nil then
		f:seek("set")
		text = f:read("*a")
	else
		text = "" -- an empty file: read("*l") is nil at its end
	end
	f:close()
	local c = parsed(path, key, text)
	if c.map then
		return c.map
	end
	return nil, c.kind, c.msg
end

-- One entry of a tres_per_* list. Returns prefix, count (string or nil) when it is an untyped GPU request
-- for at least one GPU; nil otherwise (typed GPU, 0 GPUs, not a GPU).
function SF.untyped_gpu(entry)
	local prefix, rest = entry:match("^(gres[:/])gpu(.*)$")
	if not prefix then
		return nil
	end
	if rest == "" then
		return prefix, nil
	end
	local count = rest:match("^[:=](%d+)$")
	if count and tonumber(count) > 0 then
		return prefix, count
	end
	return nil -- typed (":v100", ":v100:2", ":v100=2"), zero GPUs, or something unknown: left alone
end

-- The value with every untyped GPU entry typed; nil if nothing changed.
function SF.type_value(value, gtype)
	if type(value) ~= "string" or value == "" then
		return nil
	end
	local out, changed = {}, false
	for entry in value:gmatch("[^,]+") do
		local prefix, count = SF.untyped_gpu(entry)
		if prefix then
			entry = prefix .. "gpu:" .. gtype .. (count and (":" .. count) or "")
			changed = true
		end
		out[#out + 1] = entry
	end
	if not changed then
		return nil
	end
	return table.concat(out, ",")
end

-- Fields of job_desc that hold an untyped GPU request (a list of names, empty if none).
function SF.untyped_fields(job_desc)
	local names = {}
	for _, name in ipairs(SF.FIELDS) do
		local v = job_desc[name]
		if type(v) == "string" and SF.type_value(v, "x") then
			names[#names + 1] = name
		end
	end
	return names
end

function SF.with_flex(comment)
	if comment == nil or comment == "" then
		return SF.FLEX_TOKEN
	end
	for tok in comment:gmatch("[^%s,;]+") do
		if tok == SF.FLEX_TOKEN then
			return comment
		end
	end
	return comment .. " " .. SF.FLEX_TOKEN
end

-- The job's placement options that typing could contradict (--constraint, --nodelist, --exclude): a list of
-- "option value" strings, empty when it names none.
SF.PLACEMENT = { { "features", "--constraint" }, { "req_nodes", "--nodelist" }, { "exc_nodes", "--exclude" } }

function SF.placement(job_desc)
	local out = {}
	for _, f in ipairs(SF.PLACEMENT) do
		local v = job_desc[f[1]]
		if type(v) == "string" and v ~= "" and v ~= "(null)" then
			out[#out + 1] = f[2] .. "=" .. v
		end
	end
	return out
end

-- Leave the job as it is, telling the user and slurmctld's log why (`problem`: a fault of the map, logged as an
-- error for the admins).
local function pass(uid, account, why, problem)
	slurm.log_user("slurm-fair: note: %s; untyped GPU request left unchanged", why)
	local log = problem and slurm.log_error or slurm.log_info
	log("job_submit.lua: uid=%s account=%s: %s, untyped request passed", tostring(uid), tostring(account), why)
	return slurm.SUCCESS
end

-- The decision for one submission: returns slurm.SUCCESS (and edits job_desc). Every problem leaves the job as
-- it is, with a note: the script never rejects a job.
function SF.submit(job_desc, part_list, uid)
	local fields = SF.untyped_fields(job_desc)
	if #fields == 0 then
		return slurm.SUCCESS -- typed or no GPU request: untouched
	end
	local account = job_desc.account or job_desc.default_account
	local placed = SF.placement(job_desc)
	if #placed > 0 then
		return pass(uid, account, "the job names " .. table.concat(placed, " ")
			.. ", which a GPU type could contradict (request a type explicitly to get one)")
	end
	local path = SF.map_path()
	local map, kind, msg = SF.read_map(path, account)
	if not map then
		if kind == "missing" then -- shadow mode publishes none, nor a daemon not yet started: not news to users
			slurm.log_info("job_submit.lua: uid=%s account=%s: no GPU type map yet (%s), untyped request passed "
				.. "(nothing said to the user)", tostring(uid), tostring(account), msg)
			return slurm.SUCCESS
		end
		return pass(uid, account, "the GPU type map is broken (" .. msg .. ")", true)
	end
	if map.expires and SF.clock() > map.expires then
		return pass(uid, account, string.format("the GPU type map %s is stale (expired %d s ago: slurm-fair's "
			.. "daemon has not published it since)", path, SF.clock() - map.expires), true)
	end
	local entry, why = map.entries[account or ""], nil
	if entry then
		why = entry.reason
	elseif map.default then
		entry = map.default
		why = entry.reason and ("no entry for the account; default: " .. entry.reason)
			or "no entry for the account; cluster default"
	elseif map.listed_only then
		return slurm.SUCCESS -- not a pilot account: Slurm alone decides, as without slurm-fair
	else
		return pass(uid, account, string.format("no GPU type is known for account '%s' (no line for it and no "
			.. "'*' line in %s)", tostring(account), path), true)
	end
	local key = map.entries[account or ""] and account or "*"
	local allowed = nil
	if map.partitioned then
		local kept, why_not
		kept, why_not, allowed = SF.in_partitions(map, entry, job_desc, part_list, account)
		if not kept then
			return pass(uid, account, why_not)
		end
		entry = kept
	end
	local cls = SF.job_class(job_desc, map.order)
	local class_key = cls and account and (map.classes[account .. "/" .. cls] and (account .. "/" .. cls)
		or map.classes["*/" .. cls] and ("*/" .. cls))
	local class_order = class_key and map.classes[class_key]
	if class_order then
		entry = SF.for_class(entry, class_order)
	end
	local limit = tonumber(job_desc.time_limit) -- minutes; NO_VAL / INFINITE: none
	local speed = class_key and map.speed and map.speed[class_key]
	local prefer = nil
	if speed then
		local secs = (limit and limit > 0 and limit < 0xfffffffe) and limit * 60 or nil
		prefer = function(pick, gpus, idle)
			return SF.by_completion(map, speed, pick, gpus, secs, allowed, SF.clock(), idle)
		end
	end
	local gtype, note = SF.choose(SF.map_identity(map), key, entry, SF.job_gpus(job_desc),
		SF.loose_room(map, account, class_order or nil, allowed, class_key and map.slow[class_key]), map.taken_at,
		map.free, prefer, map.soon, class_key and map.slow[class_key])
	if note then
		why = note
	end
	if not gtype then
		slurm.log_user("slurm-fair: untyped GPU request left untyped (account %s: %s)", tostring(account), why)
		slurm.log_info("job_submit.lua: uid=%s account=%s: %s", tostring(uid), tostring(account), why)
		return slurm.SUCCESS
	end
	local changes = {}
	for _, name in ipairs(fields) do
		local old = job_desc[name]
		local new = SF.type_value(old, gtype)
		job_desc[name] = new
		changes[#changes + 1] = string.format("%s %s -> %s", name, old, new)
	end
	job_desc.comment = SF.with_flex(job_desc.comment)
	slurm.log_user("slurm-fair: untyped GPU request given type '%s' (account %s%s)", gtype,
		tostring(account), why and (": " .. why) or "")
	slurm.log_info("job_submit.lua: uid=%s account=%s: %s", tostring(uid), tostring(account),
		table.concat(changes, "; "))
	return slurm.SUCCESS
end

-- slurm_job_submit: the decision under pcall. An error (a bug here) is logged and the job passes as it was
-- submitted: the fields the decision may edit are put back first.
local EDITED = { "comment" }
for _, name in ipairs(SF.FIELDS) do
	EDITED[#EDITED + 1] = name
end

function SF.job_submit(job_desc, part_list, submit_uid)
	local saved = {}
	for _, name in ipairs(EDITED) do
		saved[name] = job_desc[name]
	end
	local ok, rc = pcall(SF.submit, job_desc, part_list, submit_uid)
	if ok and rc == slurm.SUCCESS then
		return rc
	end
	for _, name in ipairs(EDITED) do
		local v = saved[name]
		if job_desc[name] ~= v and not pcall(function() job_desc[name] = v end) and v == nil then
			pcall(function() job_desc[name] = "" end) -- slurmctld's job_desc takes no nil: "" clears a field
		end
	end
	pcall(slurm.log_error, "job_submit.lua: internal error: %s; the job passes unchanged", tostring(rc))
	pcall(slurm.log_user, "slurm-fair: note: job_submit.lua internal error (%s); request left unchanged",
		tostring(rc))
	return slurm.SUCCESS
end

-- slurm_job_modify: changes nothing.
function SF.job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

if AS_MODULE then
	slurm.log_info("slurm-fair job_submit module loaded; type map %s", SF.map_path())
	return SF
end

slurm_fair_submit = SF -- internals, reachable by the offline tests (tests/lua/)
slurm_job_submit = SF.job_submit
slurm_job_modify = SF.job_modify

slurm.log_info("job_submit.lua (slurm-fair) loaded; type map %s", SF.map_path())
return slurm.SUCCESS
