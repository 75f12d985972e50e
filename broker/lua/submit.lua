-- submit.lua: (new) -> IDLE | HELD | VALIDATING | BLOCKED for a batch of staged
-- jobs (stage.lua wrote their hashes, FetchworkState and JobStatus included).
-- KEYS: the pool keys of lib.lua (touches queue, idle, validating and events only).
-- ARGV[1] now ms or '', ARGV[2] events cap,
-- ARGV[3] the batch: one msgpack array of {job id, sequence, FetchworkOrder
--   as a decimal string, held (boolean), blocked (boolean: scheduling policy
--   places it, see broker/policing.py)} per job,
-- ARGV[4] '1' when stage.lua made the batch VALIDATING: its jobs join the
--   validating set (score = sequence) for the leader's submission filters.
-- Queued jobs join the queue set (score = sequence), IDLE ones the idle set
-- (score = FetchworkOrder); BLOCKED ones wait for the policy's pass; one
-- 'submit' event per job.
-- Returns the number of jobs queued.
local batch = cmsgpack.unpack(ARGV[3])
local validate = ARGV[4] == '1'
local queued, idle, validating = {}, {}, {}
for j = 1, #batch do
  local id, seq, order, held = batch[j][1], batch[j][2], batch[j][3], batch[j][4]
  local blocked = batch[j][5]
  queued[#queued + 1] = score(seq)
  queued[#queued + 1] = id
  if validate then
    validating[#validating + 1] = score(seq)
    validating[#validating + 1] = id
    event('submit', id, 'VALIDATING', STATUS_IDLE)
  elseif held then
    event('submit', id, 'HELD', STATUS_HELD)
  elseif blocked then
    event('submit', id, 'BLOCKED', STATUS_IDLE)
  else
    idle[#idle + 1] = order
    idle[#idle + 1] = id
    event('submit', id, 'IDLE', STATUS_IDLE)
  end
end
zadd_chunked(K_QUEUE, queued)
zadd_chunked(K_IDLE, idle)
zadd_chunked(K_VALIDATING, validating)
return #batch
