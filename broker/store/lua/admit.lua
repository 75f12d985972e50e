-- admit.lua: VALIDATING -> IDLE | HELD | BLOCKED once the leader's submission chains and
-- the job template accepted the job (a job submitted on hold is HELD; with
-- scheduling policy limits, a job placed with a BlockedReason is BLOCKED).
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] JobPrio
--   (clamped, for the idle order), ARGV[5] n = attributes to delete,
--   ARGV[6..5+n] their names, then (name, packed value) pairs to store.
-- FetchworkOrder becomes -JobPrio * PRIO_SCALE + the job's sequence.
-- Returns 1, or 0 when the job no longer waits for admission (removed meanwhile;
-- then it leaves the validating set).
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
if not awaits_admission(key, id) then
  redis.call('ZREM', K_VALIDATING, id)
  return 0
end
redis.call('ZREM', K_VALIDATING, id)
local deleted = tonumber(ARGV[5])
for i = 6, 5 + deleted do hdel(key, ARGV[i]) end
store_attrs(key, 6 + deleted, #ARGV)
place_admitted(key, id, ARGV[4])
return 1
