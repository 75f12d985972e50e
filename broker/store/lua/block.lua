-- block.lua: IDLE -> BLOCKED for jobs the scheduling policy keeps out of
-- scheduling (broker/scheduling/eligibility.py), or a BLOCKED job's new reason.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in batch
--   order; then the soft set (zset of the jobs BLOCKED only by a soft PS
--   limit, score = FetchworkOrder: claim.lua's last resort for a slot no
--   IDLE job can use).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the batch: one msgpack
--   array of {job id, BlockedReason, soft (boolean), policy attributes (a map:
--   FetchworkBudget, FetchworkCpus, FetchworkWalltime, FetchworkPsLimit, the
--   claim's re-check)} per job.
-- Only IDLE and BLOCKED jobs change. IDLE -> BLOCKED leaves the idle set,
-- keeps JobStatus IDLE (HTCondor has no blocked code) and emits one 'block'
-- event; a BLOCKED job only gets its new reason and attributes.
-- Jobs waiting on dependencies are left alone (broker/dependencies/resolver.py decides them).
-- Returns the number of jobs written.
local batch = cmsgpack.unpack(ARGV[3])
local K_SOFT = KEYS[FIRST_JOB_KEY + #batch]
local written = 0
for j = 1, #batch do
  local key, item = KEYS[FIRST_JOB_KEY + j - 1], batch[j]
  local id, reason, soft = item[1], item[2], item[3]
  local state = getv(key, 'FetchworkState')
  if (state == 'IDLE' or state == 'BLOCKED') and not waits_on_deps(key) then
    for name, value in pairs(item[4]) do setv(key, name, value) end
    setv(key, 'BlockedReason', reason)
    setv(key, 'BlockedBySoftLimit', soft)
    if soft then
      redis.call('ZADD', K_SOFT, score(getv(key, 'FetchworkOrder') or 0), id)
    else
      redis.call('ZREM', K_SOFT, id)
    end
    if state == 'IDLE' then
      idle_remove(key, id)
      set_state(key, 'BLOCKED', STATUS_IDLE)
      event('block', id, 'BLOCKED', STATUS_IDLE)
    end
    written = written + 1
  end
end
return written
