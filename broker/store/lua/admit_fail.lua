-- admit_fail.lua: VALIDATING -> FAILED (into history) when a submission filter
-- or the job template failed the job.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] RemoveReason.
-- Returns 1, or 0 when the job no longer waits for admission (jobstates.lua).
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
if not awaits_admission(key, id) then
  redis.call('ZREM', K_VALIDATING, id)
  return 0
end
setv(key, 'RemoveReason', ARGV[4])
to_history(key, id, 'admit', 'FAILED', STATUS_REMOVED)
return 1
