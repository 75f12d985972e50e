-- admit_signed.lua: VALIDATING -> IDLE | HELD | BLOCKED for a batch of jobs whose
-- admission is their signature alone (a pool that signs its jobs and has no
-- submission filter or job template: broker/filters/leader.py), as admit.lua does
-- for one job whose filters passed.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, then per job three values: its id, its
--   JobPrio (clamped, for the idle order) and its FetchworkSignature.
-- A job no longer VALIDATING (removed meanwhile) is left alone. FetchworkOrder
-- becomes -JobPrio * PRIO_SCALE + the job's sequence; one 'admit' event per job.
-- Returns the number of jobs admitted.
local admitted = 0
for j = 0, (#ARGV - 2) / 3 - 1 do
  local key = KEYS[FIRST_JOB_KEY + j]
  local id, prio, signature = ARGV[3 + 3 * j], ARGV[4 + 3 * j], ARGV[5 + 3 * j]
  if getv(key, 'FetchworkState') == 'VALIDATING' then
    redis.call('ZREM', K_VALIDATING, id)
    setv(key, 'FetchworkSignature', signature)
    place_admitted(key, id, prio)
    admitted = admitted + 1
  end
end
return admitted
