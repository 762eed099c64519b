--[[
slurm-fair job_submit.lua: gives untyped GPU requests the GPU type slurm-fair planned for the account.

Slurm does not count an untyped request (--gres=gpu:1, --gpus=1, --gpus-per-task=1, ...) against typed
GrpTRES=gres/gpu:<type>=N limits (checked on 22.05 and 24.11). This script types such requests at
submission, so the per-type limits slurm-fair sets hold for every GPU job.

Rules:
  * The map is `gpu_type_map.txt` in this script's folder, re-read on every submission. slurm-fair's daemon
    writes it each round (config [submit] type_map). Lines: `ACCOUNT TYPE [REASON...]`; `* TYPE [REASON]` is
    the default for accounts without a line; `#` starts a comment line; blank lines are ignored.
  * A GPU entry without a type in tres_per_node / tres_per_job / tres_per_task / tres_per_socket gets the
    account's type (account = job_desc.account or job_desc.default_account), keeping the prefix it was
    written with (22.05 `gres:gpu:2` -> `gres:gpu:v100:2`; 24.11 `gres/gpu:2` -> `gres/gpu:v100:2`,
    `gres/gpu=1` -> `gres/gpu:v100:1`). The comment gets the token `fair:flex` (the user's comment is kept);
    the user is told the type and why on stderr.
  * Typed GPU requests, requests for 0 GPUs and non-GPU jobs are never changed.
  * No map file (the daemon never ran): the job passes unchanged, with a note to the user.
  * Unreadable or broken map, or no line for the account and no `*` line: an untyped GPU job is rejected
    with a message naming the problem and how to request a type; every other job passes.
  * Internal error (a bug here): logged; a job with an untyped GPU request is rejected, every other job
    passes.
  * slurm_job_modify changes nothing (scontrol update of a pending job passes unchanged; on 22.05 changing a
    pending job's GPU type is broken, Slurm bug 17184).
Check before installing: luac5.1 -p job_submit.lua (a broken script stops slurmctld from starting).
]]

local SF = {}
slurm_fair_submit = SF -- internals, reachable by the offline tests (tests/lua/)

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

function SF.map_path()
	return SF.script_dir() .. "/" .. SF.MAP_NAME
end

local function trim(s)
	return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function valid_name(s)
	return s ~= nil and s:match("^[%w_.%-]+$") ~= nil
end

-- Parse the map text. Returns {entries = {account -> {type=, reason=}}, default = {type=, reason=} or nil}
-- or nil, "line N: problem".
function SF.parse_map(text)
	local map = { entries = {}, default = nil, types = {} }
	local n = 0
	for line in (text .. "\n"):gmatch("([^\n]*)\n") do
		n = n + 1
		line = trim(line:gsub("\r$", ""))
		if line ~= "" and line:sub(1, 1) ~= "#" then
			local acct, gtype, rest = line:match("^(%S+)%s+(%S+)%s*(.*)$")
			if not acct then
				return nil, string.format("line %d: expected 'ACCOUNT TYPE [REASON]', got '%s'", n, line)
			end
			if acct ~= "*" and not valid_name(acct) then
				return nil, string.format("line %d: bad account name '%s'", n, acct)
			end
			if not valid_name(gtype) or gtype:match("^%d+$") then
				return nil, string.format("line %d: bad GPU type '%s'", n, gtype)
			end
			local e = { type = gtype, reason = rest ~= "" and rest or nil }
			if acct == "*" then
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
			map.types[gtype] = true
		end
	end
	return map
end

-- Read the map. Returns map | nil, kind ("missing" | "broken"), message.
function SF.read_map(path)
	local f, err, code = io.open(path, "r")
	if not f then
		if code == ENOENT then
			return nil, "missing", path .. " does not exist"
		end
		return nil, "broken", "cannot read " .. tostring(err)
	end
	local text = f:read("*a")
	f:close()
	if text == nil then
		return nil, "broken", "cannot read " .. path
	end
	local map, perr = SF.parse_map(text)
	if not map then
		return nil, "broken", path .. " " .. perr
	end
	return map
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

local function example(map)
	local t = map and (map.default and map.default.type or next(map.types)) or nil
	t = t or "TYPE"
	return string.format("--gres=gpu:%s:1 or --gpus=%s:1", t, t)
end

-- The decision for one submission: returns slurm.SUCCESS or slurm.ERROR (and edits job_desc).
function SF.submit(job_desc, uid)
	local fields = SF.untyped_fields(job_desc)
	if #fields == 0 then
		return slurm.SUCCESS -- typed or no GPU request: untouched
	end
	local account = job_desc.account or job_desc.default_account
	local path = SF.map_path()
	local map, kind, msg = SF.read_map(path)
	if not map then
		if kind == "missing" then
			slurm.log_user("slurm-fair: note: no GPU type map yet (%s); untyped GPU request left unchanged", msg)
			slurm.log_info("job_submit.lua: uid=%s account=%s: no type map (%s), untyped request passed",
				tostring(uid), tostring(account), msg)
			return slurm.SUCCESS
		end
		slurm.log_user("slurm-fair: GPU request without a type, and the GPU type map is broken (%s). "
			.. "Request a type explicitly, e.g. %s.", msg, example(nil))
		slurm.log_error("job_submit.lua: broken type map: %s", msg)
		return slurm.ERROR
	end
	local entry, why = map.entries[account or ""], nil
	if entry then
		why = entry.reason
	elseif map.default then
		entry = map.default
		why = entry.reason and ("no entry for the account; default: " .. entry.reason)
			or "no entry for the account; cluster default"
	else
		slurm.log_user("slurm-fair: GPU request without a type, and no GPU type is known for account '%s' "
			.. "(no line for it and no '*' line in %s). Request a type explicitly, e.g. %s.",
			tostring(account), path, example(map))
		return slurm.ERROR
	end
	local changes = {}
	for _, name in ipairs(fields) do
		local old = job_desc[name]
		local new = SF.type_value(old, entry.type)
		job_desc[name] = new
		changes[#changes + 1] = string.format("%s %s -> %s", name, old, new)
	end
	job_desc.comment = SF.with_flex(job_desc.comment)
	slurm.log_user("slurm-fair: untyped GPU request given type '%s' (account %s%s)", entry.type,
		tostring(account), why and (": " .. why) or "")
	slurm.log_info("job_submit.lua: uid=%s account=%s: %s", tostring(uid), tostring(account),
		table.concat(changes, "; "))
	return slurm.SUCCESS
end

local function mentions_gpu(job_desc)
	for _, name in ipairs(SF.FIELDS) do
		local v = job_desc[name]
		if type(v) == "string" and v:find("gpu", 1, true) then
			return true
		end
	end
	return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, rc = pcall(SF.submit, job_desc, submit_uid)
	if ok then
		return rc
	end
	slurm.log_error("job_submit.lua: internal error: %s", tostring(rc))
	local ok2, fields = pcall(SF.untyped_fields, job_desc)
	local needs = (ok2 and #fields > 0) or (not ok2 and mentions_gpu(job_desc))
	if needs then
		slurm.log_user("slurm-fair: job_submit.lua internal error while typing this GPU request (%s); "
			.. "request a GPU type explicitly (e.g. --gres=gpu:TYPE:1) or contact the admins.", tostring(rc))
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

slurm.log_info("job_submit.lua (slurm-fair) loaded; type map %s", SF.map_path())
return slurm.SUCCESS
