-- submit.lua: (new) -> IDLE | HELD | VALIDATING | BLOCKED for a batch of staged
-- jobs (stage.lua wrote their hashes, FetchworkState and JobStatus included).
-- KEYS: the pool keys of lib.lua (touches queue, idle, validating, events and
--   the autocluster index only); KEYS[FIRST_JOB_KEY] the pool's settings hash
--   (store/poolrules.py).
-- ARGV[1] now ms or '', ARGV[2] events cap (the pool's published
--   events_maxlen, when there is one, takes its place),
-- ARGV[3] the batch: one msgpack array of {job id, sequence, FetchworkOrder
--   as a decimal string, held (boolean), blocked (boolean: its dependencies
--   keep it BLOCKED), autocluster id (the job's FetchworkAutocluster, '' for
--   none)} per job,
-- ARGV[4] the batch's mode as stage.lua answered it: 'validating' (its jobs join
--   the validating set, score = sequence, for the leader's admission),
--   'blocked' (scheduling limits: its jobs wait BLOCKED for the policy's pass)
--   or ''. The pool's rules as published now can only make it stricter: with
--   none published, or with submission filters (or job signing), the jobs wait
--   VALIDATING whatever ARGV[4] says (the leader admits them, and re-checks each
--   against the rules, never trusting this call's flags), and with scheduling
--   limits they wait BLOCKED even when ARGV[4] says ''.
-- ARGV[5] msgpack array {autocluster id, representative, ...} of the batch's
--   autoclusters (ac:reps entries; an existing entry is kept).
-- Queued jobs join the queue set (score = sequence), IDLE ones the idle set
-- (score = FetchworkOrder) and their autocluster; BLOCKED ones wait for the
-- policy's pass; one 'submit' event for the batch's jobs of each state
-- (jobstates.lua batch_event: an entry naming its jobs, in batch order).
-- Returns the number of jobs queued.
local rules = redis.call('HMGET', KEYS[FIRST_JOB_KEY], 'version', 'filtered', 'events_maxlen',
                         'limits')
local published = rules[1] ~= false
if published and tonumber(rules[3]) then MAXLEN = rules[3] end
local batch = cmsgpack.unpack(ARGV[3])
local validate = ARGV[4] == 'validating' or not published or rules[2] == '1'
local block_all = ARGV[4] == 'blocked' or (published and rules[4] == '1')
local reps = cmsgpack.unpack(ARGV[5])
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
