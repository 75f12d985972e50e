-- trim_history.lua: forget the oldest finished jobs (a clean-up, not a job
-- transition; it stands alone, without lib.lua).
-- KEYS[1]    history zset (finished jobs, score = end time in ms)
-- KEYS[2..n] hashes of the jobs to forget, as the caller read them from the
--            head of the history
-- ARGV[1..n-1] the ids of those jobs, in the same order
-- A job is forgotten only if it is still in the history (finished jobs never
-- change state, so a concurrent trim at worst forgets fewer).
-- Returns the number of jobs forgotten.
local forgotten = 0
for i = 2, #KEYS do
  local id = ARGV[i - 1]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('DEL', KEYS[i])
    forgotten = forgotten + 1
  end
end
return forgotten
