--[[
An example of a site's own job_submit.lua that keeps its own rules and calls slurm-fair's GPU typing as a
module. Install slurm-fair's job_submit.lua NEXT TO this script under the name slurm_fair_submit.lua (it reads
gpu_type_map.txt next to itself), check both, and install each in one rename:

  SF=$(slurm-fair files | grep '/job_submit.lua$')     # slurm-fair's script (shipped in the wheel)
  luac5.1 -p "$SF" job_submit.lua                       # both compile (a broken script stops slurmctld)
  install -m 644 "$SF" /etc/slurm/.sf.new && mv /etc/slurm/.sf.new /etc/slurm/slurm_fair_submit.lua

slurmctld reloads job_submit.lua when its mtime grows, not when the module changes: after replacing
slurm_fair_submit.lua, `touch /etc/slurm/job_submit.lua`.

The module is loaded ONCE, here at the top (its Lua state counts the GPUs it hands out between two map
updates; loading it on every submission would forget them). A missing or broken module must not stop this
script from loading (slurmctld would not start, or would keep an old script): it is loaded under pcall and,
when it fails, jobs pass through this script's own rules only. Instead of dofile:
  package.path = "/etc/slurm/?.lua;" .. package.path
  local ok, sf = pcall(require, "slurm_fair_submit")
]]

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "/etc/slurm"
local NO_VAL = 4294967294

local loaded, sf = pcall(dofile, HERE .. "/slurm_fair_submit.lua")
if not loaded or type(sf) ~= "table" then
	slurm.log_error("job_submit.lua: slurm-fair module %s/slurm_fair_submit.lua not loaded (%s): GPU requests "
		.. "are not typed", HERE, tostring(sf))
	sf = nil
end

-- The site's own rule (an example): a job without a time limit gets one hour.
local function site_rules(job_desc, part_list, submit_uid)
	if job_desc.time_limit == nil or job_desc.time_limit == NO_VAL then
		job_desc.time_limit = 60
		slurm.log_user("site: no --time given, the job gets 1 hour")
	end
	return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local rc = site_rules(job_desc, part_list, submit_uid)
	if rc ~= slurm.SUCCESS or sf == nil then
		return rc
	end
	-- slurm-fair types untyped GPU requests (it sees what the site's rules set, e.g. job_desc.partition)
	return sf.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if sf == nil then
		return slurm.SUCCESS
	end
	return sf.job_modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
