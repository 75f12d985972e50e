-- userlog_advance.lua: move the user log writer's position in the event
-- stream forward (compare-and-set), only for the replica that leads. Stands
-- alone (no lib.lua).
-- KEYS[1] the pool's userlog key (string: id of the last event written to
--   the jobs' user logs), KEYS[2] the pool's leader key.
-- ARGV[1] the caller's replica id, ARGV[2] the position the caller read
--   ('' when there was none), ARGV[3] the new position.
-- Returns 1 when the position moved, 0 when the caller does not lead or
-- another writer moved it meanwhile (the caller then reads it again).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
return 1
