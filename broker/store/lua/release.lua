-- release.lua: HELD -> IDLE (back at its place in the idle order); a claimed
-- job marked held gets its claim back (JobStatus 2, or 7 when suspended).
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3..] job ids.
-- HoldReason moves to LastHoldReason; its code and subcode go, and a HoldUntil
-- ends with the hold. Returns the ids affected.
local done = {}
for i = 3, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 3], ARGV[i]
  local state = getv(key, 'FetchworkState')
  local status = getv(key, 'JobStatus')
  local released = false
  if state == 'HELD' then
    to_idle(key, id, 'release')
    released = true
  elseif is_claimed(state) and status == STATUS_HELD then
    local resumed = state == 'SUSPENDED' and STATUS_SUSPENDED or STATUS_RUNNING
    set_pending_status(key, id, 'release', state, resumed)
    released = true
  end
  if released then
    local reason = hget_raw(key, 'HoldReason')
    if reason then redis.call('HSET', key, 'LastHoldReason', reason) end
    hdel(key, 'HoldReason', 'HoldReasonCode', 'HoldReasonSubCode', 'HoldUntil')
    redis.call('ZREM', K_HOLDS, id)
    done[#done + 1] = id
  end
end
return done
