-- activate_start.lua: ACTIVATING -> RUNNING on the slot whose claim asked
-- (the activation chain answered 0).
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash,
--   KEYS[FIRST_JOB_KEY + 1] the claim's reply list, KEYS[FIRST_JOB_KEY + 2]
--   its activation request hash (deleted).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
--   token, ARGV[5] default lease seconds, ARGV[6] reply lifetime ms.
-- The reply is cmsgpack {job id, its ad flat} as claim.lua returns, or
-- 'no' when the claim is gone (it gave up, or the job was removed or held).
-- Returns 1 when the job started, 0 otherwise (the leader then reverts).
local key, id, token = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[4]
local reply, request = KEYS[FIRST_JOB_KEY + 1], KEYS[FIRST_JOB_KEY + 2]
redis.call('DEL', request)
if not own_activation(key, token) then
  answer(reply, 'no', ARGV[6])
  return 0
end
local slot = getv(key, 'FetchworkActivationSlot')
answer(reply, start_claim(key, id, token, slot, ARGV[5]), ARGV[6])
return 1
