-- reject.lua: RUNNING -> IDLE at the head of the job's priority group (the
-- slot declined the job it fetched).
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim token.
-- The new FetchworkOrder keeps the priority part and takes a sequence from
-- counter:head (decreasing, below every submission). A job removed or held
-- meanwhile completes that transition instead.
-- Returns the new state, or nil when the claim is not the caller's.
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
if not own_claim(key, ARGV[4]) then return nil end
local status = getv(key, 'JobStatus')
if status == STATUS_REMOVED or status == STATUS_HELD then
  return settle(key, id, 'reject', 'evict', '')
end
setv(key, 'FetchworkOrder', head_of_group(getv(key, 'FetchworkOrder') or 0))
leave_claim(key, id)
to_idle(key, id, 'reject')
return 'IDLE'
