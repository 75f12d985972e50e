-- leader_resign.lua: give up leadership if the caller holds it. Stands alone (no lib.lua).
-- KEYS[1] the pool's leader key. ARGV[1] the caller's replica id.
-- Returns 1 when the caller was the leader, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
