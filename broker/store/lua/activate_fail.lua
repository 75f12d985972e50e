-- activate_fail.lua: ACTIVATING -> FAILED (into history) when the activation
-- chain answered 4.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash,
--   KEYS[FIRST_JOB_KEY + 1] the claim's reply list, KEYS[FIRST_JOB_KEY + 2]
--   its activation request hash (deleted).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
--   token, ARGV[5] RemoveReason, ARGV[6] reply lifetime ms.
-- The reply is 'no'. Returns 1, or 0 when the claim is gone.
local key, id, token = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[4]
local reply, request = KEYS[FIRST_JOB_KEY + 1], KEYS[FIRST_JOB_KEY + 2]
redis.call('DEL', request)
answer(reply, 'no', ARGV[6])
if not own_activation(key, token) then return 0 end
leave_activation(key, id)
setv(key, 'RemoveReason', ARGV[5])
to_history(key, id, 'activation', 'FAILED', STATUS_REMOVED)
return 1
