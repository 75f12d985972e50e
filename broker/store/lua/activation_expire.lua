-- activation_expire.lua: ACTIVATING -> IDLE for jobs whose activation outlived
-- its deadline (the claim and the leader that ran the chain are gone), so a
-- broker service that dies mid-activation loses no job.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] grace ms past the
--   deadline (the claim gives the job back itself until then), ARGV[4..] job ids.
-- Returns the ids put back.
local done = {}
local grace = tonumber(ARGV[3])
for i = 4, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 4], ARGV[i]
  local deadline = tonumber(redis.call('ZSCORE', K_ACTIVATING, id))
  if getv(key, 'FetchworkState') ~= 'ACTIVATING' then
    redis.call('ZREM', K_ACTIVATING, id)
  elseif deadline and deadline + grace <= NOW then
    leave_activation(key, id)
    to_idle(key, id, 'expire')
    done[#done + 1] = id
  end
end
return done
