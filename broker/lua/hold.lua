-- hold.lua: IDLE|BLOCKED -> HELD; a claimed job is marked (JobStatus 5) and
-- is held when its claim ends.
-- KEYS: the pool keys of lib.lua; KEYS[13..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] HoldReason,
-- ARGV[4] HoldReasonCode, ARGV[5..] job ids.
-- Returns the ids affected (held, finished, or marked jobs are skipped).
local done = {}
local code = tonumber(ARGV[4])
for i = 5, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 5], ARGV[i]
  local state = getv(key, 'FetchworkState')
  local status = getv(key, 'JobStatus')
  if state == 'IDLE' or state == 'BLOCKED' then
    to_held(key, id, 'hold', ARGV[3], code)
    done[#done + 1] = id
  elseif is_claimed(state) and status ~= STATUS_REMOVED and status ~= STATUS_HELD then
    setv(key, 'HoldReason', ARGV[3])
    setv(key, 'HoldReasonCode', code)
    set_pending_status(key, id, 'hold', state, STATUS_HELD)
    done[#done + 1] = id
  end
end
return done
