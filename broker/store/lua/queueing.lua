-- queueing.lua: putting a batch of staged jobs in the queue (submit.lua's work),
-- shared by submit.lua and by stage.lua when one call stages and queues a
-- submission of a single batch (store/scripts.py puts it before their own text).
-- queue_batch(settings, batch, mode, reps):
--   settings  the pool's settings hash (store/poolrules.py),
--   batch     {job id, sequence, FetchworkOrder as a decimal string, held
--             (boolean), blocked (boolean: its dependencies keep it BLOCKED),
--             autocluster id ('' for none)} per job,
--   mode      how stage.lua said the batch waits: 'validating' (the validating
--             set, score = sequence, for the leader's admission), 'blocked'
--             (scheduling limits: BLOCKED for the policy's pass) or ''. The
--             pool's rules as published now can only make it stricter: with
--             none published, or with submission filters (or job signing), the
--             jobs wait VALIDATING whatever `mode` says (the leader admits them,
--             and re-checks each against the rules, never trusting the caller's
--             flags), and with scheduling limits they wait BLOCKED even when
--             `mode` is '',
--   reps      {autocluster id, representative, ...} of the batch's autoclusters
--             (ac:reps entries; an existing entry is kept).
-- Queued jobs join the queue set (score = sequence), IDLE ones the idle set
-- (score = FetchworkOrder) and their autocluster; BLOCKED ones wait for the
-- policy's pass; one 'submit' event for the batch's jobs of each state
-- (jobstates.lua batch_event: an entry naming its jobs, in batch order). The
-- pool's published events_maxlen, when there is one, caps the stream.
-- A batch is queued whole by one script, so a batch whose first job is in the
-- queue or the history was queued by an earlier run of the same call (a client
-- that sent it again after losing the reply): queue_batch then does nothing and
-- returns 0 (queueing it again would repeat its events, and put back a job that
-- has finished since).
local function queued_before(batch)
  local first = batch[1] and batch[1][1]
  return first ~= nil and (redis.call('ZSCORE', K_QUEUE, first) ~= false
                           or redis.call('ZSCORE', K_HISTORY, first) ~= false)
end

local function queue_batch(settings, batch, mode, reps)
  if queued_before(batch) then return 0 end
  local rules = redis.call('HMGET', settings, 'version', 'filtered', 'events_maxlen', 'limits')
  local published = rules[1] ~= false
  if published and tonumber(rules[3]) then MAXLEN = rules[3] end
  local validate = mode == 'validating' or not published or rules[2] == '1'
  local block_all = mode == 'blocked' or (published and rules[4] == '1')
  for r = 1, #reps, 2 do redis.call('HSETNX', K_AC_REPS, reps[r], reps[r + 1]) end
  local queued, idle, validating, members, best = {}, {}, {}, {}, {}
  local entered = {VALIDATING = {}, HELD = {}, BLOCKED = {}, IDLE = {}}
  for j = 1, #batch do
    local id, seq, order, held = batch[j][1], batch[j][2], batch[j][3], batch[j][4]
    local blocked, gid = batch[j][5], batch[j][6] or ''
    queued[#queued + 1] = score(seq)
    queued[#queued + 1] = id
    if validate then
      validating[#validating + 1] = score(seq)
      validating[#validating + 1] = id
      entered.VALIDATING[#entered.VALIDATING + 1] = id
    elseif held then
      entered.HELD[#entered.HELD + 1] = id
    elseif blocked or block_all then
      entered.BLOCKED[#entered.BLOCKED + 1] = id
    else
      idle[#idle + 1] = order
      idle[#idle + 1] = id
      local number = tonumber(order)
      members[#members + 1] = 0
      members[#members + 1] = ac_member(gid, number, id)
      if not best[gid] or number < best[gid] then best[gid] = number end
      entered.IDLE[#entered.IDLE + 1] = id
    end
  end
  batch_event('submit', entered.VALIDATING, 'VALIDATING', STATUS_IDLE)
  batch_event('submit', entered.HELD, 'HELD', STATUS_HELD)
  batch_event('submit', entered.BLOCKED, 'BLOCKED', STATUS_IDLE)
  batch_event('submit', entered.IDLE, 'IDLE', STATUS_IDLE)
  zadd_chunked(K_QUEUE, queued)
  zadd_chunked(K_IDLE, idle)
  zadd_chunked(K_AC_MEMBERS, members)
  for gid, number in pairs(best) do
    redis.call('ZADD', K_AC_GROUPS, 'LT', score(number), gid)
  end
  zadd_chunked(K_VALIDATING, validating)
  return #batch
end
