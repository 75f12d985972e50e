-- activate_hold.lua: ACTIVATING -> HELD until HoldUntil (the activation chain
-- answered 3); the leader releases the job by itself when the time passes.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash,
--   KEYS[FIRST_JOB_KEY + 1] the claim's reply list, KEYS[FIRST_JOB_KEY + 2]
--   its activation request hash (deleted).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
--   token, ARGV[5] HoldReason, ARGV[6] HoldUntil (epoch s), ARGV[7] reply lifetime ms.
-- The reply is 'no'. Returns 1, or 0 when the claim is gone.
local key, id, token = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[4]
local reply, request = KEYS[FIRST_JOB_KEY + 1], KEYS[FIRST_JOB_KEY + 2]
redis.call('DEL', request)
answer(reply, 'no', ARGV[7])
if not own_activation(key, token) then return 0 end
leave_activation(key, id)
setv(key, 'HoldUntil', tonumber(ARGV[6]))
setv(key, 'FetchworkActivationReason', ARGV[5])
redis.call('ZADD', K_HOLDS, ARGV[6], id)
to_held(key, id, 'activation', ARGV[5], HOLD_JOB_POLICY)
return 1
