-- What the offline Lua tests of job_submit.lua share (tests/lua/test_*.lua load it with dofile): files in
-- fresh folders, the mocked `slurm` table, loading the script the way slurmctld does, cases and checks.
-- `H.load_top` runs the script's chunk in a coroutine: called from C as slurmctld calls it (no Lua caller),
-- it is the top-level job_submit.lua and defines its globals; `dofile`/`require` from Lua code load it as a module.

local H = { passed = 0, failed = 0, dirs = {} }

function H.read(path)
	local f = assert(io.open(path, "r"))
	local s = f:read("*a")
	f:close()
	return s
end

function H.write(path, text)
	local f = assert(io.open(path, "w"))
	f:write(text)
	f:close()
end

function H.new_dir()
	local d = os.tmpname()
	os.remove(d)
	assert(os.execute("mkdir -m 700 '" .. d .. "'") == 0, "mkdir " .. d)
	H.dirs[#H.dirs + 1] = d
	return d
end

-- the mocked slurm table: collects what the script tells the user and logs
function H.mock_slurm()
	local m = { SUCCESS = 0, ERROR = -1, user = {}, info = {}, err = {} }
	m.log_user = function(fmt, ...) m.user[#m.user + 1] = string.format(fmt, ...) end
	m.log_info = function(fmt, ...) m.info[#m.info + 1] = string.format(fmt, ...) end
	m.log_error = function(fmt, ...) m.err[#m.err + 1] = string.format(fmt, ...) end
	m.log_debug = m.log_info
	return m
end

-- Run a file's chunk as slurmctld does (from C, no Lua caller: in a fresh coroutine); returns its result.
function H.load_top(path)
	local chunk = assert(loadfile(path))
	local co = coroutine.create(chunk)
	local ok, rc = coroutine.resume(co)
	assert(ok, tostring(rc))
	return rc
end

-- H.prepare, then the script loaded from that folder as slurmctld does (its top level must return SUCCESS);
-- returns the folder. map_text nil = no map file.
function H.load(source, map_text)
	local dir = H.prepare(source, map_text)
	assert(H.load_top(dir .. "/job_submit.lua") == slurm.SUCCESS, "top level returns slurm.SUCCESS")
	return dir
end

-- A fresh folder with `source` as `name` (default job_submit.lua) and, unless map_text is nil, the map next to
-- it; a new mocked `slurm`, the script's globals cleared. Returns the folder.
function H.prepare(source, map_text, name)
	local dir = H.new_dir()
	H.write(dir .. "/" .. (name or "job_submit.lua"), source)
	if map_text then
		H.write(dir .. "/gpu_type_map.txt", map_text)
	end
	slurm = H.mock_slurm()
	slurm_job_submit, slurm_job_modify, slurm_fair_submit = nil, nil, nil
	return dir
end

function H.case(name, fn)
	local ok, err = pcall(fn)
	if ok then
		H.passed = H.passed + 1
		print("ok   " .. name)
	else
		H.failed = H.failed + 1
		print("FAIL " .. name .. ": " .. tostring(err))
	end
end

function H.eq(got, want, what)
	if got ~= want then
		error(string.format("%s: got %s, want %s", what or "value", tostring(got), tostring(want)), 2)
	end
end

function H.has(list, needle, what)
	for _, s in ipairs(list) do
		if s:find(needle, 1, true) then
			return s
		end
	end
	error(string.format("%s: no message contains %q (got: %s)", what or "messages", needle,
		table.concat(list, " | ")), 2)
end

-- Remove the folders, print "N passed, N failed" and exit (1 on a failure).
function H.finish()
	for _, d in ipairs(H.dirs) do
		os.execute("rm -rf '" .. d .. "'")
	end
	print(string.format("%d passed, %d failed", H.passed, H.failed))
	os.exit(H.failed == 0 and 0 or 1)
end

return H
