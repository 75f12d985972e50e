-- submit.lua: (new) -> IDLE | HELD for a batch of staged jobs (stage.lua
-- wrote their hashes, FetchworkState and JobStatus included).
-- KEYS: the pool keys of lib.lua (touches queue, idle, events and the autoclusters).
-- ARGV[1] now ms or '', ARGV[2] events cap,
-- ARGV[3] the batch: one msgpack array of {job id, sequence, FetchworkOrder
--   as a decimal string, held (boolean), autocluster id} per job,
-- ARGV[4] msgpack map: autocluster id -> packed representative, for the
--   groups of this batch (kept once per group in ac:reps).
-- Queued jobs join the queue set (score = sequence), IDLE ones the idle set
-- (score = FetchworkOrder) and their autocluster; one 'submit' event per job.
-- Returns the number of jobs queued.
local batch = cmsgpack.unpack(ARGV[3])
for gid, rep in pairs(cmsgpack.unpack(ARGV[4])) do
  redis.call('HSETNX', K_AC_REPS, gid, rep)
end
local queued, idle, members, best = {}, {}, {}, {}
for j = 1, #batch do
  local id, seq, order, held, gid = batch[j][1], batch[j][2], batch[j][3], batch[j][4], batch[j][5]
  queued[#queued + 1] = score(seq)
  queued[#queued + 1] = id
  if held then
    event('submit', id, 'HELD', STATUS_HELD)
  else
    idle[#idle + 1] = order
    idle[#idle + 1] = id
    local number = tonumber(order)
    members[#members + 1] = 0
    members[#members + 1] = ac_member(gid, number, id)
    if not best[gid] or best[gid] > number then best[gid] = number end
    event('submit', id, 'IDLE', STATUS_IDLE)
  end
end
zadd_chunked(K_QUEUE, queued)
zadd_chunked(K_IDLE, idle)
zadd_chunked(K_AC_MEMBERS, members)
for gid, order in pairs(best) do
  local now_best = redis.call('ZSCORE', K_AC_GROUPS, gid)
  if not now_best or tonumber(now_best) > order then
    redis.call('ZADD', K_AC_GROUPS, score(order), gid)
  end
end
return #batch
