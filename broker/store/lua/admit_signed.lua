-- admit_signed.lua: VALIDATING -> IDLE | HELD | BLOCKED for a batch of jobs whose
-- admission is their signature and the pool's rules (a pool that signs its jobs and
-- has no submission filter or job template: broker/filters/leader.py), as admit.lua
-- does for one job whose filters passed (jobstates.lua place_admitted), with the
-- batch's sorted-set writes made once for all its jobs.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the BlockedReason the pool's
--   scheduling limits give a job, ARGV[4] the batch's signed string
--   (config/signedjob.py sign_batch_blob: the jobs are its leaves in ARGV order),
--   then per job four values: its id, its JobPrio (clamped, for the idle order),
--   '1' when the limits keep it BLOCKED for the policy's pass (else ''), and its
--   autocluster as the leader grouped it ('' to keep the stored one).
-- The batch's string is stored once, as batch n (a number from sigcount not in use:
-- sigbatch.lua describes the keys), with the runs of the jobs admitted, and each
-- admitted job's hash gets SIG_REF "<n>:<its place in the batch>" (a FetchworkSignature
-- it held is dropped); the claim rebuilds its signature from them (sigbatch.lua).
-- A job that no longer awaits admission (removed meanwhile: jobstates.lua
-- awaits_admission) is left alone and leaves the validating set. FetchworkOrder
-- becomes -JobPrio * PRIO_SCALE + the job's sequence; a job submitted on hold is
-- HELD, one with a BlockedReason or dependencies BLOCKED, any other IDLE in its
-- autocluster; one 'admit' event for the batch's IDLE jobs and one for its BLOCKED ones
-- (jobstates.lua batch_event: an entry naming its jobs), a HELD job's own.
-- Returns the number of jobs admitted.
local WIDTH = 4
local count = (#ARGV - 4) / WIDTH
local ids = {}
for j = 0, count - 1 do ids[j + 1] = ARGV[5 + WIDTH * j] end
local P = string.sub(K_QUEUE, 1, #K_QUEUE - #'queue')
local number = nil
if count > 0 then
  -- A number no stored batch has (the counter is the leader's, but never trusted).
  repeat
    number = redis.call('INCR', P .. 'sigcount')
  until redis.call('EXISTS', P .. 'sig:' .. number) == 0
end
-- The admitted jobs as runs of consecutive procs of one cluster (sig_sweep.lua).
local runs, run_cluster, run_first, run_last = {}, nil, nil, nil
local function add_run(id)
  local cluster, proc = string.match(id, '^(%d+)%.(%d+)$')
  if not cluster then return end
  proc = tonumber(proc)
  if cluster == run_cluster and proc == run_last + 1 then
    run_last = proc
    return
  end
  if run_cluster then runs[#runs + 1] = run_cluster .. '.' .. run_first .. '-' .. run_last end
  run_cluster, run_first, run_last = cluster, proc, proc
end
local seqs = count > 0 and redis.call('ZMSCORE', K_QUEUE, unpack(ids)) or {}
local NAMES = {'FetchworkState', 'HoldReasonCode', 'BlockedReason', 'FetchworkWaitingOn',
               AUTOCLUSTER_ATTR, 'FetchworkSignature', 'FetchworkOrder', 'JobStatus'}
-- What a job that awaits admission may show (awaits_admission), packed.
local AWAITS = {[cmsgpack.pack('VALIDATING')] = 'always', [cmsgpack.pack('IDLE')] = 'listed',
                [cmsgpack.pack('BLOCKED')] = 'listed', [cmsgpack.pack('HELD')] = 'listed'}
local admitted, gone, idle, members, best = 0, {}, {}, {}, {}
local entered = {IDLE = {}, BLOCKED = {}}
-- A job's NAMES as its ad gives them (jobad.lua hmget_raw), with each cluster hash
-- read once for the batch (this script writes job hashes only) and a linked job's
-- derived FetchworkOrder made from its cluster's '#order' and its sequence read
-- above for the whole batch, not from one HGET and one ZSCORE a job.
local N, ORDER_AT = #NAMES, 7
local ASKED, CLUSTER_ASKED = {unpack(NAMES)}, {unpack(NAMES)}
ASKED[N + 1], CLUSTER_ASKED[N + 1] = JOB_LINK, CLUSTER_ORDER
local shared_of = {}
local function read_job(key, seq)
  local got = redis.call('HMGET', key, unpack(ASKED))
  local linked = got[N + 1]
  got[N + 1] = nil
  if not linked then return got end
  local ckey = cluster_key(key)
  local shared = shared_of[ckey]
  if not shared then
    shared = redis.call('HMGET', ckey, unpack(CLUSTER_ASKED))
    shared_of[ckey] = shared
  end
  for i = 1, N do
    if not got[i] then
      if i == ORDER_AT then
        local base = shared[N + 1]
        got[i] = base and seq and cmsgpack.pack(tonumber(base) + tonumber(seq)) or false
      else
        got[i] = shared[i]
      end
    end
  end
  return got
end
local PACKED_IDLE_STATUS, PACKED_NOW = cmsgpack.pack(STATUS_IDLE), cmsgpack.pack(NOW_S)
local PACKED_STATE = {IDLE = cmsgpack.pack('IDLE'), BLOCKED = cmsgpack.pack('BLOCKED')}
for j = 0, count - 1 do
  local key = KEYS[FIRST_JOB_KEY + j]
  local at = 5 + WIDTH * j
  local id, prio = ARGV[at], ARGV[at + 1]
  local blocked, group = ARGV[at + 2], ARGV[at + 3]
  local got = read_job(key, seqs[j + 1])
  local awaits = got[1] and AWAITS[got[1]]
  gone[#gone + 1] = id
  -- Only a job no longer VALIDATING needs its place in the validating set looked up
  -- (one ZSCORE then): the batch's scores are not all read back to be dropped.
  if awaits == 'always' or (awaits == 'listed' and redis.call('ZSCORE', K_VALIDATING, id)) then
    local order = -tonumber(prio) * PRIO_SCALE + (tonumber(seqs[j + 1]) or 0)
    local fields = {SIG_REF, number .. ':' .. j}
    -- What the job's ad already says (its cluster's, most often) is not written again:
    -- FetchworkOrder when the cluster's order gives it, JobStatus and
    -- EnteredCurrentStatus when it is Idle already (VALIDATING is Idle too).
    local packed_order = cmsgpack.pack(order)
    if got[7] ~= packed_order then
      fields[#fields + 1] = 'FetchworkOrder'
      fields[#fields + 1] = packed_order
    end
    if got[6] then redis.call('HDEL', key, 'FetchworkSignature') end
    add_run(id)
    if blocked == '1' and not got[3] then
      fields[#fields + 1] = 'BlockedReason'
      fields[#fields + 1] = cmsgpack.pack(ARGV[3])
      got[3] = fields[#fields]
    end
    local gid = got[5] and cmsgpack.unpack(got[5])
    if group ~= '' then
      fields[#fields + 1] = AUTOCLUSTER_ATTR
      fields[#fields + 1] = cmsgpack.pack(group)
      gid = group
    end
    if type(gid) ~= 'string' then gid = '' end
    local held = got[2] and cmsgpack.unpack(got[2]) == HOLD_SUBMITTED_ON_HOLD
    local state = held and 'HELD' or ((got[3] or got[4]) and 'BLOCKED' or 'IDLE')
    if not held then
      fields[#fields + 1] = 'FetchworkState'
      fields[#fields + 1] = PACKED_STATE[state]
      if got[8] ~= PACKED_IDLE_STATUS then
        fields[#fields + 1] = 'JobStatus'
        fields[#fields + 1] = PACKED_IDLE_STATUS
        fields[#fields + 1] = 'EnteredCurrentStatus'
        fields[#fields + 1] = PACKED_NOW
      end
    end
    redis.call('HSET', key, unpack(fields))
    if held then
      to_held(key, id, 'admit', nil, nil)
    else
      if state == 'IDLE' then
        idle[#idle + 1] = score(order)
        idle[#idle + 1] = id
        members[#members + 1] = 0
        members[#members + 1] = ac_member(gid, order, id)
        if not best[gid] or order < best[gid] then best[gid] = order end
      end
      local named = entered[state]
      named[#named + 1] = id
    end
    admitted = admitted + 1
  end
end
if admitted > 0 then
  if run_cluster then runs[#runs + 1] = run_cluster .. '.' .. run_first .. '-' .. run_last end
  redis.call('SET', P .. 'sig:' .. number, ARGV[4])
  redis.call('SET', P .. 'sig:' .. number .. ':jobs', table.concat(runs, ' '))
  redis.call('SADD', P .. 'sigbatches', number)
end
batch_event('admit', entered.IDLE, 'IDLE', STATUS_IDLE)
batch_event('admit', entered.BLOCKED, 'BLOCKED', STATUS_IDLE)
if #gone > 0 then
  for start = 1, #gone, 1000 do
    redis.call('ZREM', K_VALIDATING, unpack(gone, start, math.min(start + 999, #gone)))
  end
end
zadd_chunked(K_IDLE, idle)
zadd_chunked(K_AC_MEMBERS, members)
for gid, order in pairs(best) do
  redis.call('ZADD', K_AC_GROUPS, 'LT', score(order), gid)
end
return admitted
