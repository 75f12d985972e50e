-- finish.lua: end a claim: RUNNING|SUSPENDED -> COMPLETED (exit),
-- IDLE or FAILED (evict; Rerunnable = false gives FAILED), HELD (hold),
-- REMOVED (remove). A pending removal wins over any how; a pending hold over evict.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
-- token, ARGV[5] how, ARGV[6] reason ('' for none), ARGV[7] HoldReasonCode and
-- ARGV[8] HoldReasonSubCode of a hold ('' for none), ARGV[9..] attribute
-- name/packed-value pairs stored before the transition.
-- How 'exit?' is an exit the job's policy may turn into something else
-- (broker/jobpolicy/onexit.py): ARGV[7] then holds the exit policy's attribute
-- names (space-separated); when the job has any of them, other than
-- OnExitRemove = true, nothing changes and the reply is 'policy' (the caller
-- judges, then finishes); otherwise it is an exit.
-- Returns the new state, or nil when the claim is not the caller's.
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
if not own_claim(key, ARGV[4]) then return nil end
if ARGV[5] == 'exit?' then
  for name in string.gmatch(ARGV[7], '%S+') do
    local raw = hget_raw(key, name)
    if raw and raw ~= cmsgpack.pack(string.lower(name) == 'onexitremove') then
      return 'policy'
    end
  end
  ARGV[5], ARGV[7] = 'exit', ''
end
store_attrs(key, 9, #ARGV)
return settle(key, id, 'finish', ARGV[5], ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]))
