-- hold.lua: IDLE|BLOCKED|ACTIVATING -> HELD; a claimed job is marked
-- (JobStatus 5) and is held when its claim ends. With a HoldUntil the hold
-- ends by itself (the leader's release_due.lua); a held job may get a new one.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] HoldReason,
-- ARGV[4] HoldReasonCode, ARGV[5] HoldUntil (epoch s) or '' for a plain hold,
-- ARGV[6..] job ids.
-- A VALIDATING job is not held: its submission filters decide first.
-- Returns the ids affected (held, finished, or marked jobs are skipped).
local done = {}
local code, until_s = tonumber(ARGV[4]), tonumber(ARGV[5])

local function set_until(key, id)
  if until_s then
    setv(key, 'HoldUntil', until_s)
    redis.call('ZADD', K_HOLDS, until_s, id)
  else
    hdel(key, 'HoldUntil')
    redis.call('ZREM', K_HOLDS, id)
  end
end

for i = 6, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 6], ARGV[i]
  local state = getv(key, 'FetchworkState')
  local status = getv(key, 'JobStatus')
  if state == 'IDLE' or state == 'BLOCKED' or state == 'ACTIVATING' then
    if state == 'ACTIVATING' then leave_activation(key, id) end
    set_until(key, id)
    to_held(key, id, 'hold', ARGV[3], code)
    done[#done + 1] = id
  elseif state == 'HELD' and until_s then
    set_until(key, id)
    event('hold', id, 'HELD', STATUS_HELD, 'until', ARGV[5])
    done[#done + 1] = id
  elseif is_claimed(state) and status ~= STATUS_REMOVED and status ~= STATUS_HELD then
    setv(key, 'HoldReason', ARGV[3])
    setv(key, 'HoldReasonCode', code)
    set_until(key, id)
    set_pending_status(key, id, 'hold', state, STATUS_HELD)
    done[#done + 1] = id
  end
end
return done
