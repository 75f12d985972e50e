-- policy_act.lua: what the leader's periodic pass (broker/jobpolicy/periodic.py) found a
-- job's PeriodicHold, PeriodicRelease or PeriodicRemove asks for, on one job:
--   hold:    IDLE|BLOCKED|ACTIVATING -> HELD (HoldReasonCode 3, the subcode);
--            a claimed job is marked (JobStatus 5) and held when its claim
--            ends, as hold.lua does.
--   release: HELD -> IDLE; a claimed job marked held gets its claim back, as
--            release.lua does; ReleaseReason tells why.
--   remove:  IDLE|HELD|BLOCKED|ACTIVATING -> REMOVED; a claimed job is marked
--            (JobStatus 3) and removed when its claim ends, as remove.lua does.
-- The events are those of the user's hold, release and remove.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] action:
-- hold, release or remove, ARGV[5] the reason, ARGV[6] HoldReasonSubCode of a hold.
-- Returns the action, or nil when the job's state does not allow it (any
-- more): finished, already held, not held, already marked.
local key, id, action, reason = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[4], ARGV[5]
local state = getv(key, 'FetchworkState')
local status = getv(key, 'JobStatus')
if not state then return nil end
local waiting = state == 'IDLE' or state == 'BLOCKED' or state == 'ACTIVATING'
local subcode = tonumber(ARGV[6]) or 0

if action == 'hold' then
  if waiting then
    if state == 'ACTIVATING' then leave_activation(key, id) end
    hdel(key, 'HoldUntil')
    redis.call('ZREM', K_HOLDS, id)
    to_held(key, id, 'hold', reason, HOLD_JOB_POLICY, subcode)
    return action
  elseif is_claimed(state) and status ~= STATUS_REMOVED and status ~= STATUS_HELD then
    setv(key, 'HoldReason', reason)
    setv(key, 'HoldReasonCode', HOLD_JOB_POLICY)
    setv(key, 'HoldReasonSubCode', subcode)
    set_pending_status(key, id, 'hold', state, STATUS_HELD)
    return action
  end
elseif action == 'release' then
  if state == 'HELD' then
    to_idle(key, id, 'release')
  elseif is_claimed(state) and status == STATUS_HELD then
    local resumed = state == 'SUSPENDED' and STATUS_SUSPENDED or STATUS_RUNNING
    set_pending_status(key, id, 'release', state, resumed)
  else
    return nil
  end
  local held_for = hget_raw(key, 'HoldReason')
  if held_for then redis.call('HSET', key, 'LastHoldReason', held_for) end
  hdel(key, 'HoldReason', 'HoldReasonCode', 'HoldReasonSubCode', 'HoldUntil')
  redis.call('ZREM', K_HOLDS, id)
  setv(key, 'ReleaseReason', reason)
  return action
elseif action == 'remove' then
  if waiting or state == 'HELD' then
    if state == 'ACTIVATING' then leave_activation(key, id) end
    setv(key, 'RemoveReason', reason)
    to_history(key, id, 'remove', 'REMOVED', STATUS_REMOVED)
    return action
  elseif is_claimed(state) and status ~= STATUS_REMOVED then
    setv(key, 'RemoveReason', reason)
    set_pending_status(key, id, 'remove', state, STATUS_REMOVED)
    return action
  end
else
  return redis.error_reply('policy_act: the action must be hold, release or remove')
end
return nil
