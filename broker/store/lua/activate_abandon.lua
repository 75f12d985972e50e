-- activate_abandon.lua: a claim that waited its longest for an activation
-- verdict gives up: ACTIVATING -> IDLE (a verdict that comes later finds the
-- claim gone and is undone). When the verdict came first and started the job,
-- the claim takes it after all.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash,
--   KEYS[FIRST_JOB_KEY + 1] the claim's activation request hash (deleted).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim token.
-- Returns cmsgpack {job id, its ad flat} when the job runs under this
-- claim, else nil.
local key, id, token = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[4]
redis.call('DEL', KEYS[FIRST_JOB_KEY + 1])
if own_activation(key, token) then
  leave_activation(key, id)
  to_idle(key, id, 'abandon')
  return nil
end
if own_claim(key, token) then
  return cmsgpack.pack({id, with_signature(key, ad_flat(key))})
end
return nil
