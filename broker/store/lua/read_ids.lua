-- read_ids.lua: the members of a sorted set (job ids) as one string, one per
-- line, so that a client reads 100,000 ids as one reply instead of 100,000
-- (a read, not a transition; it stands alone, without lib.lua).
-- KEYS[1] a sorted set of job ids (the queue or the history).
-- ARGV[1] first rank, ARGV[2] last rank (ZRANGE's start and stop; -1: the end),
-- ARGV[3] "rev" for highest score first, else lowest first.
-- Returns the members joined by "\n" (an empty string when there are none).
local members
if ARGV[3] == 'rev' then
  members = redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2])
else
  members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2])
end
return table.concat(members, '\n')
