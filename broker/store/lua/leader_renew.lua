-- leader_renew.lua: extend broker leadership if the caller holds it
-- (compare-and-extend; taking a free lease is a plain SET NX PX). Stands
-- alone (no lib.lua).
-- KEYS[1] the pool's leader key.
-- ARGV[1] the caller's replica id, ARGV[2] lease in ms.
-- Returns 1 when the caller is the leader for the next ARGV[2] ms, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
