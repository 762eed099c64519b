-- One grammar for class= and fair: tokens (issue 30 item 7): the vectors of tests/fixtures/token_grammar.tsv
-- against job_submit.lua's class and fair:flex readers (the daemon and the hook: tests/test_token_grammar.py).
-- Run: lua5.1 tests/lua/test_token_grammar.lua [path/to/job_submit.lua] [path/to/token_grammar.tsv]

local SCRIPT = arg[1] or "etc/job_submit.lua"
local VECTORS = arg[2] or "tests/fixtures/token_grammar.tsv"
local H = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/harness.lua")
local SOURCE = H.read(SCRIPT)

local function unhex(s)
	if s == "-" then
		return nil
	end
	return (s:gsub("..", function(h) return string.char(tonumber(h, 16)) end))
end

for line in io.lines(VECTORS) do
	if line ~= "" and line:sub(1, 1) ~= "#" then
		local c, k, f = line:match("^([^\t]*)\t([^\t]*)\t([01])$")
		local comment, cls, flex = unhex(c) or "", unhex(k), f == "1"
		H.case(string.format("%q -> %s, flex %s", comment, tostring(cls), tostring(flex)), function()
			H.load(SOURCE, "* v100\n")
			local SF = slurm_fair_submit
			H.eq(SF.job_class({ comment = comment, name = "NAME" }, { "comment", "wckey", "name" }), cls or "NAME",
				"class")
			H.eq(SF.with_flex(comment) == comment and comment ~= "", flex, "carries fair:flex")
		end)
	end
end
H.finish()
