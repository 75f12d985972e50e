-- depend.lua: apply the dependency decisions of broker/dependencies/graph.py
-- to jobs waiting on dependencies (FetchworkWaitingOn set):
--   ready: BLOCKED -> IDLE ('depend' event); a HELD or VALIDATING job only stops
--          waiting (its release or admission then makes it IDLE);
--   wait:  FetchworkWaitingOn and BlockedReason name the dependencies left
--          (a HELD job keeps the BlockedReason it goes back to on release);
--   fail:  BLOCKED|HELD|VALIDATING -> FAILED with the RemoveReason given
--          ('depend' event; the jobs waiting on this one are decided next).
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in
--   batch order; then the depwait set (jobs waiting on dependencies).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the batch: one msgpack
--   array of {job id, verdict ('ready'|'wait'|'fail'), dependencies left ("12.0,12.3"),
--   reason (BlockedReason or RemoveReason)} per job.
-- A job no longer waiting (finished, or decided before) only leaves the depwait set.
-- Returns the number of jobs changed.
local batch = cmsgpack.unpack(ARGV[3])
local K_DEPWAIT = KEYS[FIRST_JOB_KEY + #batch]
local changed = 0
for j = 1, #batch do
  local key, item = KEYS[FIRST_JOB_KEY + j - 1], batch[j]
  local id, verdict, left, reason = item[1], item[2], item[3], item[4]
  local state = getv(key, 'FetchworkState')
  local waiting = state == 'BLOCKED' or state == 'HELD' or state == 'VALIDATING'
  if not waiting or not waits_on_deps(key) then
    redis.call('SREM', K_DEPWAIT, id)
  elseif verdict == 'wait' then
    setv(key, 'FetchworkWaitingOn', left)
    setv(key, 'BlockedReason', reason)
    changed = changed + 1
  elseif verdict == 'ready' then
    hdel(key, 'FetchworkWaitingOn', 'BlockedReason')
    redis.call('SREM', K_DEPWAIT, id)
    if state == 'BLOCKED' then to_idle(key, id, 'depend') end
    changed = changed + 1
  elseif verdict == 'fail' then
    hdel(key, 'FetchworkWaitingOn')
    redis.call('SREM', K_DEPWAIT, id)
    setv(key, 'RemoveReason', reason)
    to_history(key, id, 'depend', 'FAILED', STATUS_REMOVED)
    changed = changed + 1
  end
end
return changed
