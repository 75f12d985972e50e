-- overrun.lua: a claimed job that ran past its walltime is marked to stop
-- (the leader's policy pass, broker/scheduling/leaderpass.py): like a removal, its
-- JobStatus becomes 3 at once, renew() answers "removed" so the execute side
-- stops it, and when its claim ends it goes to history FAILED (not REMOVED)
-- with the RemoveReason given here.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3..] pairs: job id, RemoveReason.
-- Jobs no longer claimed, or already marked for removal, are left alone, and so
-- is a RunUntilCanceled job whose command ended (JobState Idle): its starter
-- ends it at its walltime, as a completion (starter/keepslot.py).
-- Returns the ids marked.
local done = {}
for i = 3, #ARGV, 2 do
  local key, id = KEYS[FIRST_JOB_KEY + (i - 3) / 2], ARGV[i]
  local state = getv(key, 'FetchworkState')
  local kept = getv(key, 'RunUntilCanceled') == true and getv(key, 'JobState') == 'Idle'
  if is_claimed(state) and getv(key, 'JobStatus') ~= STATUS_REMOVED and not kept then
    setv(key, 'RemoveReason', ARGV[i + 1])
    setv(key, 'FetchworkOverrun', true)
    set_pending_status(key, id, 'overrun', state, STATUS_REMOVED)
    done[#done + 1] = id
  end
end
return done
