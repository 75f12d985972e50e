-- requeue.lua: the user's Requeue (the scheduler text's Requeue command): a
-- claimed job is marked (FetchworkRequeue, one 'requeue' event) and, when its
-- claim ends, goes back to IDLE at the head of its priority group whatever its
-- Rerunnable says (lib.lua's settle); renew.lua answers 'requeued' meanwhile so
-- the execute side vacates it. A job that is not claimed is left unchanged.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3..] job ids.
-- Returns the ids marked (jobs not claimed, already marked, or being removed
-- or held are skipped).
local done = {}
for i = 3, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 3], ARGV[i]
  local state = getv(key, 'FetchworkState')
  local status = getv(key, 'JobStatus')
  if is_claimed(state) and status ~= STATUS_REMOVED and status ~= STATUS_HELD
      and not getv(key, 'FetchworkRequeue') then
    setv(key, 'FetchworkRequeue', true)
    event('requeue', id, state, status)
    done[#done + 1] = id
  end
end
return done
