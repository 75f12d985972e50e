-- remove.lua: IDLE|HELD|BLOCKED|VALIDATING|ACTIVATING -> REMOVED (into
-- history; an activation's late verdict then finds it gone); a claimed job is
-- marked (JobStatus 3) and is removed when its claim ends.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] RemoveReason, ARGV[4..] job ids.
-- Returns the ids affected (finished jobs and jobs already marked are skipped).
local done = {}
for i = 4, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 4], ARGV[i]
  local state = getv(key, 'FetchworkState')
  local status = getv(key, 'JobStatus')
  if state == 'IDLE' or state == 'HELD' or state == 'BLOCKED' or state == 'VALIDATING'
      or state == 'ACTIVATING' then
    if state == 'ACTIVATING' then leave_activation(key, id) end
    setv(key, 'RemoveReason', ARGV[3])
    to_history(key, id, 'remove', 'REMOVED', STATUS_REMOVED)
    done[#done + 1] = id
  elseif is_claimed(state) and status ~= STATUS_REMOVED then
    setv(key, 'RemoveReason', ARGV[3])
    set_pending_status(key, id, 'remove', state, STATUS_REMOVED)
    done[#done + 1] = id
  end
end
return done
