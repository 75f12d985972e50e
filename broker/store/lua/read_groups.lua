-- read_groups.lua: what a claim reads of the autocluster index first, in one
-- call (broker/claim/index.py): the autoclusters with idle jobs, the counts that
-- tell whether the index covers the idle set, and the first jobs of the best
-- placed autoclusters. Reads only.
-- KEYS[1] ac:groups (zset: autocluster -> best idle score), KEYS[2] idle (zset),
--   KEYS[3] ac:members (zset by lex: "<autocluster>|<score, order_text>|<job id>").
-- ARGV[1] how many autoclusters' first jobs to return, ARGV[2] how many jobs each.
-- Returns {{autocluster id, best score, ...} best first, ZCARD idle, ZCARD ac:members,
--   {members of each of the first ARGV[1] autoclusters, ARGV[2] at most}}.
local groups = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local heads = {}
for i = 1, math.min(#groups / 2, tonumber(ARGV[1])) do
  local gid = groups[2 * i - 1]
  heads[i] = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. gid .. '|', '(' .. gid .. '}',
                        'LIMIT', '0', ARGV[2])
end
return {groups, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), heads}
