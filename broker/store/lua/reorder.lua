-- reorder.lua: new idle scores for jobs still IDLE (the scheduling policy's
-- weighted order, broker/scheduling/leaderpass.py), and each one's FetchworkPriority.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in
--   batch order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the batch: one msgpack
--   array of {job id, idle score as a decimal string, FetchworkPriority} per job.
-- The idle set and the autocluster index move together; FetchworkOrder (the
-- job's place when it becomes IDLE again) is left alone. No event.
-- Returns the number of jobs moved.
local batch = cmsgpack.unpack(ARGV[3])
local moved = 0
for j = 1, #batch do
  local key, item = KEYS[FIRST_JOB_KEY + j - 1], batch[j]
  if redis.call('ZSCORE', K_IDLE, item[1]) then
    idle_add(key, item[1], tonumber(item[2]))
    setv(key, 'FetchworkPriority', item[3])
    moved = moved + 1
  end
end
return moved
