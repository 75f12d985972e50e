-- lib.lua: the pool's keys and the helpers shared by the job transition
-- scripts; store/scripts.py puts this text in front of each of them before loading
-- (after jobad.lua; acindex.lua and jobstates.lua follow), after a generated
-- header that defines PRIO_SCALE, STATUS_<NAME> (HTCondor's JobStatus codes)
-- and HOLD_<NAME> (HoldReasonCode values) from the Python code.
--
-- Every job transition script receives the pool's keys first, in this order:
--   KEYS[1] queue     zset  unfinished jobs, score = submission sequence
--   KEYS[2] idle      zset  IDLE jobs, score = FetchworkOrder (-JobPrio * 2^34 + sequence)
--   KEYS[3] running   zset  claimed jobs, score = lease expiry (ms)
--   KEYS[4] history   zset  finished jobs, score = end time (ms)
--   KEYS[5] events    stream one entry per transition
--   KEYS[6] clusters  hash  cluster number -> submission nonce
--   KEYS[7] counter:cluster, KEYS[8] counter:seq, KEYS[9] counter:head
--   KEYS[10] filters  hash  the leader's filter summary (filters/gate.py) and pass counter
--   KEYS[11] validating zset VALIDATING jobs, score = submission sequence
--   KEYS[12] activating zset ACTIVATING jobs, score = the claim's deadline (ms)
--   KEYS[13] blocks   zset  jobs whose activation answered 1, score = priority group
--   KEYS[14] reservations hash slot name -> job an activation answer 2 reserved it for
--   KEYS[15] holds    zset  held jobs with a HoldUntil, score = HoldUntil (s)
--   KEYS[16] ac:groups  zset  autocluster id -> best idle score of its jobs
--   KEYS[17] ac:members zset  every idle job as "<autocluster>|<score, order_text>|<job id>",
--                             all scores 0 (by lex)
--   KEYS[18] ac:reps    hash  autocluster id -> "<watched names>\n<msgpack representative>"
--                             (broker/claim/index.py)
--   KEYS[FIRST_JOB_KEY..] job hashes (one field per attribute, msgpack values; read
--                         through jobad.lua, over their cluster hashes)
-- and these arguments first:
--   ARGV[1] now in ms, or '' for the server's clock
--   ARGV[2] approximate cap of the events stream (XADD MAXLEN ~)
-- Job hashes use HTCondor attribute names; FetchworkState holds the state.

local K_QUEUE, K_IDLE, K_RUNNING, K_HISTORY, K_EVENTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_CLUSTERS, K_CLUSTER_COUNTER, K_SEQ, K_HEAD = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local K_FILTERS, K_VALIDATING, K_ACTIVATING = KEYS[10], KEYS[11], KEYS[12]
local K_BLOCKS, K_RESERVATIONS, K_HOLDS = KEYS[13], KEYS[14], KEYS[15]
local K_AC_GROUPS, K_AC_MEMBERS, K_AC_REPS = KEYS[16], KEYS[17], KEYS[18]
local FIRST_JOB_KEY = 19

local function now_ms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local NOW = now_ms()
local NOW_S = math.floor(NOW / 1000)
local MAXLEN = ARGV[2]

-- A score as exact decimal text (redis.call would format a number with
-- only 14 significant digits).
local function score(x)
  return string.format('%.17g', x)
end

-- FetchworkOrder at the head of the priority group of `order` (the idle
-- score is -JobPrio * PRIO_SCALE + sequence, see states.idle_order):
-- counter:head decreases below every submission's sequence.
local function head_of_group(order)
  local group = math.floor(order / PRIO_SCALE + 0.5)
  return group * PRIO_SCALE + redis.call('DECR', K_HEAD)
end

local function zadd_chunked(key, flat)
  call_chunked('ZADD', key, flat, 1, #flat, 400)
end

-- Job hashes are read through jobad.lua (a job's ad over its cluster's).
local function getv(key, name)
  local raw = hget_raw(key, name)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

local function setv(key, name, value)
  redis.call('HSET', key, name, cmsgpack.pack(value))
end

-- The values of attributes `names` (a table) by name, absent ones nil: one HMGET,
-- and one of the cluster hash for what the job does not hold itself.
local function getvs(key, names)
  local got, values = hmget_raw(key, names), {}
  for i, name in ipairs(names) do
    if got[i] then values[name] = cmsgpack.unpack(got[i]) end
  end
  return values
end

-- Set attributes {name, value, ...} in one HSET.
local function setvs(key, pairs_)
  local flat = {}
  for i = 1, #pairs_, 2 do
    flat[i], flat[i + 1] = pairs_[i], cmsgpack.pack(pairs_[i + 1])
  end
  redis.call('HSET', key, unpack(flat))
end
