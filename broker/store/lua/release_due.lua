-- release_due.lua: HELD -> IDLE for held jobs whose HoldUntil has passed (the
-- leader's timed release); HoldUntil stays until the job starts.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3..] job ids (due in the holds set).
-- A job no longer held, or held without a time, only leaves the holds set.
-- HoldReason moves to LastHoldReason. Returns the ids released.
local done = {}
for i = 3, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 3], ARGV[i]
  local until_s = getv(key, 'HoldUntil')
  if getv(key, 'FetchworkState') ~= 'HELD' or type(until_s) ~= 'number' then
    redis.call('ZREM', K_HOLDS, id)
  elseif until_s <= NOW_S then
    redis.call('ZREM', K_HOLDS, id)
    to_idle(key, id, 'release', 'reason', 'HoldUntil')
    local reason = hget_raw(key, 'HoldReason')
    if reason then redis.call('HSET', key, 'LastHoldReason', reason) end
    hdel(key, 'HoldReason', 'HoldReasonCode', 'HoldReasonSubCode')
    done[#done + 1] = id
  end
end
return done
