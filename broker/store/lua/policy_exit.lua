-- policy_exit.lua: end a claim whose job exited (how=exit) with the verdict of
-- its job policy (broker/jobpolicy/expressions.py exit_action): RUNNING|SUSPENDED -> HELD
-- (OnExitHold or PeriodicHold: HoldReasonCode 3), IDLE (OnExitRemove false:
-- the job runs again) or REMOVED (PeriodicRemove). As in finish.lua a pending
-- removal wins, and a pending hold wins over running again; NumJobCompletions
-- counts the exit whatever the verdict.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
-- token, ARGV[5] verdict: hold, requeue or remove, ARGV[6] HoldReason or
-- RemoveReason (the requeue event carries it as `reason`), ARGV[7]
-- HoldReasonSubCode of a hold, ARGV[8..] attribute name/packed-value pairs
-- stored before the transition.
-- Returns the new state, or nil when the claim is not the caller's.
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
if not own_claim(key, ARGV[4]) then return nil end
local verdict = ARGV[5]
if verdict ~= 'hold' and verdict ~= 'requeue' and verdict ~= 'remove' then
  return redis.error_reply('policy_exit: the verdict must be hold, requeue or remove')
end
store_attrs(key, 8, #ARGV)
return settle(key, id, 'finish', 'exit', ARGV[6], HOLD_JOB_POLICY, tonumber(ARGV[7]) or 0,
              verdict)
