-- reap.lua: claimed jobs whose lease lapsed -> IDLE, or FAILED when not
-- Rerunnable (a pending removal or hold completes instead).
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3..] job ids.
-- A job is reaped only if its lease (score in the running set) is still at
-- or before now, so a renew that raced the caller's scan wins.
-- Returns the ids reaped.
local reaped = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local expiry = redis.call('ZSCORE', K_RUNNING, id)
  if expiry and tonumber(expiry) <= NOW then
    settle(KEYS[FIRST_JOB_KEY + i - 3], id, 'reap', 'evict', 'lease expired')
    reaped[#reaped + 1] = id
  end
end
return reaped
