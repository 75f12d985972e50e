-- finish.lua: end a claim: RUNNING|SUSPENDED -> COMPLETED (exit),
-- IDLE or FAILED (evict; Rerunnable = false gives FAILED), HELD (hold),
-- REMOVED (remove). A pending removal wins over any how; a pending hold over evict.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
-- token, ARGV[5] how (exit, evict, hold or remove), ARGV[6] reason ('' for
-- none), ARGV[7] HoldReasonCode and ARGV[8] HoldReasonSubCode of a hold (''
-- for none), ARGV[9] the exit policy's attribute names (space-separated) for
-- an exit the job's policy may change, '' for any other finish, ARGV[10..]
-- attribute name/packed-value pairs stored before the transition.
-- An exit the job's policy may change (broker/jobpolicy/onexit.py): when the
-- job has any of the attributes ARGV[9] names, other than OnExitRemove =
-- true, nothing changes and the reply is 'policy' (the caller judges the
-- exit with the job policy, then ends the claim with its verdict).
-- Returns the new state, 'policy', or nil when the claim is not the caller's.
local key, id, how = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[5]
if not own_claim(key, ARGV[4]) then return nil end
if how == 'exit' then
  local names = {}
  for name in string.gmatch(ARGV[9], '%S+') do names[#names + 1] = name end
  local raws = #names > 0 and hmget_raw(key, names) or {}
  for i, name in ipairs(names) do
    if raws[i] and raws[i] ~= cmsgpack.pack(string.lower(name) == 'onexitremove') then
      return 'policy'
    end
  end
end
store_attrs(key, 10, #ARGV)
return settle(key, id, 'finish', how, ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]))
