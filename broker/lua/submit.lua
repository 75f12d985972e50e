-- submit.lua: (new) -> IDLE | HELD for a batch of staged jobs (stage.lua
-- wrote their hashes, FetchworkState and JobStatus included).
-- KEYS: the pool keys of lib.lua (touches queue, idle and events only).
-- ARGV[1] now ms or '', ARGV[2] events cap,
-- ARGV[3] the batch: one msgpack array of {job id, sequence, FetchworkOrder
--   as a decimal string, held (boolean)} per job.
-- Queued jobs join the queue set (score = sequence), IDLE ones the idle set
-- (score = FetchworkOrder); one 'submit' event per job.
-- Returns the number of jobs queued.
local batch = cmsgpack.unpack(ARGV[3])
local queued, idle = {}, {}
for j = 1, #batch do
  local id, seq, order, held = batch[j][1], batch[j][2], batch[j][3], batch[j][4]
  queued[#queued + 1] = score(seq)
  queued[#queued + 1] = id
  if held then
    event('submit', id, 'HELD', STATUS_HELD)
  else
    idle[#idle + 1] = order
    idle[#idle + 1] = id
    event('submit', id, 'IDLE', STATUS_IDLE)
  end
end
zadd_chunked(K_QUEUE, queued)
zadd_chunked(K_IDLE, idle)
return #batch
