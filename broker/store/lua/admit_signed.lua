-- admit_signed.lua: VALIDATING -> IDLE | HELD | BLOCKED for a batch of jobs whose
-- admission is their signature and the pool's rules (a pool that signs its jobs and
-- has no submission filter or job template: broker/filters/leader.py), as admit.lua
-- does for one job whose filters passed.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the BlockedReason the pool's
--   scheduling limits give a job, then per job five values: its id, its JobPrio
--   (clamped, for the idle order), its FetchworkSignature, '1' when the limits keep
--   it BLOCKED for the policy's pass (else ''), and its autocluster as the leader
--   grouped it ('' to keep the stored one).
-- A job no longer VALIDATING (removed meanwhile) is left alone. FetchworkOrder
-- becomes -JobPrio * PRIO_SCALE + the job's sequence; one 'admit' event per job.
-- Returns the number of jobs admitted.
local admitted = 0
for j = 0, (#ARGV - 3) / 5 - 1 do
  local key = KEYS[FIRST_JOB_KEY + j]
  local at = 4 + 5 * j
  local id, prio, signature = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local blocked, group = ARGV[at + 3], ARGV[at + 4]
  if getv(key, 'FetchworkState') == 'VALIDATING' then
    redis.call('ZREM', K_VALIDATING, id)
    setv(key, 'FetchworkSignature', signature)
    if blocked == '1' then setv(key, 'BlockedReason', ARGV[3]) end
    if group ~= '' then setv(key, AUTOCLUSTER_ATTR, group) end
    place_admitted(key, id, prio)
    admitted = admitted + 1
  end
end
return admitted
