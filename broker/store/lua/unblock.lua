-- unblock.lua: BLOCKED -> IDLE for jobs the scheduling policy now allows
-- (broker/scheduling/eligibility.py: the best blocked job of a user or project
-- first); a job already IDLE only gets its policy attributes.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in batch
--   order; then the soft set (see block.lua).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the batch: one msgpack
--   array of {job id, policy attributes (a map, see block.lua)} per job.
-- BLOCKED -> IDLE joins the idle set at FetchworkOrder, drops BlockedReason
-- and BlockedBySoftLimit, and emits one 'unblock' event with state IDLE,
-- which wakes waiting claimers. Other states are left alone.
-- Jobs waiting on dependencies are left alone (broker/dependencies/resolver.py decides them).
-- Returns the number of jobs written.
local batch = cmsgpack.unpack(ARGV[3])
local K_SOFT = KEYS[FIRST_JOB_KEY + #batch]
local written = 0
for j = 1, #batch do
  local key, item = KEYS[FIRST_JOB_KEY + j - 1], batch[j]
  local id = item[1]
  local state = getv(key, 'FetchworkState')
  if (state == 'IDLE' or state == 'BLOCKED') and not waits_on_deps(key) then
    for name, value in pairs(item[2]) do setv(key, name, value) end
    if state == 'BLOCKED' then
      redis.call('ZREM', K_SOFT, id)
      hdel(key, 'BlockedReason', 'BlockedBySoftLimit')
      to_idle(key, id, 'unblock')
    end
    written = written + 1
  end
end
return written
