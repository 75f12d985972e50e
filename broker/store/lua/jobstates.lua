-- jobstates.lua: the job state changes the transition scripts share;
-- store/scripts.py puts it after lib.lua and acindex.lua, before each script.

local function hset_chunked(key, flat, first, last)
  return call_chunked('HSET', key, flat, first, last, 200)
end

-- Store caller attributes ARGV[first..last] (name, packed value pairs); a
-- field that differs from a new name only in case is dropped, because ClassAd
-- names are case-insensitive (one of the cluster's: the job is unlinked first).
local function store_attrs(key, first, last)
  if last < first then return end
  ac_watch(key, first, last)
  local lower, from_cluster = ad_names(key)
  for i = first, last, 2 do
    local low = string.lower(ARGV[i])
    local old = lower[low]
    if old and old ~= ARGV[i] then
      if from_cluster[low] then
        detach(key)
        from_cluster = {}
      end
      redis.call('HDEL', key, old)
    end
  end
  hset_chunked(key, ARGV, first, last)
end

local function event(kind, id, state, status, ...)
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', MAXLEN, '*',
             'type', kind, 'job', id, 'state', state, 'status', tostring(status), ...)
end

-- One entry for the jobs `ids` that made the same transition in one call (a batch
-- submitted or admitted): 'jobs' names them in their order as space-separated runs,
-- "<cluster>.<proc>" or "<cluster>.<first proc>-<last proc>" for consecutive procs
-- (store/eventbatch.py reads it back as one event a job). A single job gets event()'s
-- entry. One entry instead of one a job is what keeps a batch's Redis time and AOF
-- bytes small.
local function batch_event(kind, ids, state, status)
  if not ids[1] then return end
  if not ids[2] then return event(kind, ids[1], state, status) end
  local runs, cluster, first, last = {}, nil, nil, nil
  local function close()
    if not cluster then return end
    if first == last then
      runs[#runs + 1] = cluster .. '.' .. first
    else
      runs[#runs + 1] = cluster .. '.' .. first .. '-' .. last
    end
  end
  for i = 1, #ids do
    local c, p = string.match(ids[i], '^(%d+)%.(%d+)$')
    p = tonumber(p)
    if c and c == cluster and p == last + 1 then
      last = p
    else
      close()
      if c then
        cluster, first, last = c, p, p
      else
        cluster = nil
        runs[#runs + 1] = ids[i]
      end
    end
  end
  close()
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', MAXLEN, '*', 'type', kind,
             'jobs', table.concat(runs, ' '), 'state', state, 'status', tostring(status))
end

-- The fields a move to `state` (JobStatus `status`) sets, {name, value, ...}.
local function state_fields(state, status)
  return {'FetchworkState', state, 'JobStatus', status, 'EnteredCurrentStatus', NOW_S}
end

local function set_state(key, state, status)
  setvs(key, state_fields(state, status))
end

-- A claimed job keeps its state and claim while its JobStatus shows a
-- pending removal or hold (or its cancellation); one event says so.
local function set_pending_status(key, id, kind, state, status)
  setv(key, 'JobStatus', status)
  setv(key, 'EnteredCurrentStatus', NOW_S)
  event(kind, id, state, status)
end

local function is_claimed(state)
  return state == 'RUNNING' or state == 'SUSPENDED'
end

-- The claim named by `token` on a job, or nil when the job is gone or the
-- claim is not (any longer) the caller's.
local function own_claim(key, token)
  local v = getvs(key, {'FetchworkState', 'FetchworkClaim'})
  local state = v.FetchworkState
  if not state or not is_claimed(state) then return nil end
  if v.FetchworkClaim ~= token then return nil end
  return state
end

local function lease_ms_of(lease, default_s)
  if type(lease) ~= 'number' or lease <= 0 then lease = tonumber(default_s) end
  return lease * 1000
end

local function lease_ms(key, default_s)
  return lease_ms_of(getv(key, 'JobLeaseDuration'), default_s)
end

-- The run that ends with a claim, counted as HTCondor's schedd counts it:
-- its wall time (claim to end, whole seconds) joins RemoteWallClockTime, and
-- times RequestCpus (1 unless a number) CumulativeSlotTime.
local function account_run(key)
  local v = getvs(key, {'JobCurrentStartDate', 'RequestCpus', 'RemoteWallClockTime',
                        'CumulativeSlotTime'})
  local started = tonumber(v.JobCurrentStartDate)
  if not started then return end
  local wall = math.max(0, NOW_S - started)
  local cpus = tonumber(v.RequestCpus) or 1
  setvs(key, {'LastRemoteWallClockTime', wall,
              'RemoteWallClockTime', (tonumber(v.RemoteWallClockTime) or 0) + wall,
              'CumulativeSlotTime', (tonumber(v.CumulativeSlotTime) or 0) + wall * cpus})
end

-- RUNNING|SUSPENDED -> (not claimed): forget the slot and the lease; the
-- run's accounting is done and JobState (the starter's word for a job on a
-- slot) goes.
local function leave_claim(key, id)
  account_run(key)
  redis.call('ZREM', K_RUNNING, id)
  local host = hget_raw(key, 'RemoteHost')
  if host then redis.call('HSET', key, 'LastRemoteHost', host) end
  hdel(key, 'JobState', 'RemoteHost', 'FetchworkClaim', 'FetchworkLeaseExpiry')
end

-- The priority group of an idle score (-JobPrio; see filters/gate.py group_of).
local function group_of(order)
  return math.floor(order / PRIO_SCALE + 0.5)
end

-- Whether the job is ACTIVATING under the claim named by `token`.
local function own_activation(key, token)
  return getv(key, 'FetchworkState') == 'ACTIVATING' and getv(key, 'FetchworkClaim') == token
end

-- ACTIVATING -> (not activating): forget the claim that asked.
local function leave_activation(key, id)
  redis.call('ZREM', K_ACTIVATING, id)
  hdel(key, 'FetchworkClaim', 'FetchworkActivationSlot')
end

-- What activation left on a job that starts, is held or leaves the queue:
-- its block, its slot reservation, its next evaluation time.
local function forget_activation(key, id)
  redis.call('ZREM', K_ACTIVATING, id)
  redis.call('ZREM', K_VALIDATING, id)
  redis.call('ZREM', K_BLOCKS, id)
  local slot = getv(key, 'FetchworkReservedSlot')
  if slot and redis.call('HGET', K_RESERVATIONS, slot) == id then
    redis.call('HDEL', K_RESERVATIONS, slot)
  end
  hdel(key, 'FetchworkReservedSlot', 'FetchworkActivateAfter')
end

-- The leader's verdict for a waiting claim: one entry on its reply list.
local function answer(reply, value, ttl_ms)
  redis.call('RPUSH', reply, value)
  redis.call('PEXPIRE', reply, ttl_ms)
end

-- What start_claim reads of the job, in one HMGET (and one of its cluster hash):
-- nothing start_claim changes before it writes is among them. Its writes are one
-- HSET: a claim's Redis time is mostly its calls.
local START_READS = {'JobLeaseDuration', 'NumJobMatches', 'JobCurrentStartDate',
                     'JobStartDate', 'JobRunCount', 'NumJobStarts'}

-- (not running) -> RUNNING under claim `token` on `slot`: the lease starts,
-- HoldUntil is cleared. Returns cmsgpack {job id, the job's ad flat (ad_flat)}, with
-- its signature rebuilt from its signed batch (sigbatch.lua).
local function start_claim(key, id, token, slot, default_lease_s)
  local v = getvs(key, START_READS)
  local expiry = NOW + lease_ms_of(v.JobLeaseDuration, default_lease_s)
  idle_remove(key, id)
  redis.call('ZADD', K_RUNNING, score(expiry), id)
  forget_activation(key, id)
  redis.call('ZREM', K_HOLDS, id)
  hdel(key, 'HoldUntil', 'FetchworkActivationReason', 'FetchworkActivationSlot')
  local set = {'RemoteHost', slot, 'FetchworkClaim', token,
               'FetchworkLeaseExpiry', expiry / 1000,
               'NumJobMatches', (tonumber(v.NumJobMatches) or 0) + 1}
  local function put(name, value)
    set[#set + 1] = name
    set[#set + 1] = value
  end
  -- A run starts: JobStartDate is the first one's, JobCurrentStartDate this one's.
  if v.JobCurrentStartDate then put('JobLastStartDate', v.JobCurrentStartDate) end
  if not v.JobStartDate then put('JobStartDate', NOW_S) end
  put('JobCurrentStartDate', NOW_S)
  put('JobRunCount', (tonumber(v.JobRunCount) or 0) + 1)
  put('NumJobStarts', (tonumber(v.NumJobStarts) or 0) + 1)
  local moved = state_fields('RUNNING', STATUS_RUNNING)
  for i = 1, #moved, 2 do put(moved[i], moved[i + 1]) end
  setvs(key, set)
  event('claim', id, 'RUNNING', STATUS_RUNNING, 'slot', slot)
  return cmsgpack.pack({id, with_signature(key, ad_flat(key))})
end

-- A job still waiting on dependencies (FetchworkWaitingOn, see
-- broker/dependencies/resolver.py): it may not become IDLE.
local function waits_on_deps(key)
  return hget_raw(key, 'FetchworkWaitingOn') ~= false
end

-- -> IDLE, at the job's place in the idle order; a job waiting on
-- dependencies goes BLOCKED instead (a release, an admission).
local function to_idle(key, id, kind, ...)
  if waits_on_deps(key) then
    set_state(key, 'BLOCKED', STATUS_IDLE)
    event(kind, id, 'BLOCKED', STATUS_IDLE, ...)
    return
  end
  idle_add(key, id, getv(key, 'FetchworkOrder') or 0)
  set_state(key, 'IDLE', STATUS_IDLE)
  event(kind, id, 'IDLE', STATUS_IDLE, ...)
end

-- -> HELD
local function to_held(key, id, kind, reason, code, subcode)
  idle_remove(key, id)
  forget_activation(key, id)
  if reason then setv(key, 'HoldReason', reason) end
  if code then setv(key, 'HoldReasonCode', code) end
  if subcode then setv(key, 'HoldReasonSubCode', subcode) end
  set_state(key, 'HELD', STATUS_HELD)
  -- The hold's reason, code and subcode ride on the event (the user log's 012).
  event(kind, id, 'HELD', STATUS_HELD, 'hold_reason', getv(key, 'HoldReason') or '',
        'hold_code', tostring(getv(key, 'HoldReasonCode') or 0),
        'hold_subcode', tostring(getv(key, 'HoldReasonSubCode') or 0))
end

-- -> COMPLETED | REMOVED | FAILED: out of the queue, into history.
local function to_history(key, id, kind, state, status)
  -- The job no longer needs its input files nor its checkpoint (transferrefs.lua).
  local this_job = 1
  local v = getvs(key, {'FetchworkInputManifest', 'FetchworkCheckpointManifest',
                        'FetchworkState'})
  for _, name in ipairs({'FetchworkInputManifest', 'FetchworkCheckpointManifest'}) do
    local held = v[name]
    if held then
      xfer_release(string.sub(K_QUEUE, 1, #K_QUEUE - #'queue'), held, this_job)
    end
  end
  -- A job leaving while it waits for admission takes its staged digest along (the
  -- leader drops those of the jobs it admits: filters/signing.py).
  if v.FetchworkState == 'VALIDATING' then
    local cluster, proc = string.match(id, '^(%d+)%.(%d+)$')
    if cluster then
      redis.call('HDEL', string.sub(K_QUEUE, 1, #K_QUEUE - #'queue') .. 'staged:' .. cluster,
                 proc)
    end
  end
  detach(key)  -- history keeps the whole ad (read while the job is still queued)
  redis.call('ZREM', K_QUEUE, id)
  idle_remove(key, id)
  redis.call('ZREM', K_HOLDS, id)
  forget_activation(key, id)
  redis.call('ZADD', K_HISTORY, score(NOW), id)
  if state == 'COMPLETED' then setv(key, 'CompletionDate', NOW_S) end
  set_state(key, state, status)
  event(kind, id, state, status)
end

local function rerunnable(key)
  return getv(key, 'Rerunnable') ~= false
end

-- An exit: NumJobCompletions counts it and its run is committed
-- (CommittedTime, CommittedSlotTime: runs that were not lost).
local function count_exit(key)
  local v = getvs(key, {'NumJobCompletions', 'LastRemoteWallClockTime', 'RequestCpus',
                        'CommittedTime', 'CommittedSlotTime'})
  local wall = tonumber(v.LastRemoteWallClockTime) or 0
  local cpus = tonumber(v.RequestCpus) or 1
  setvs(key, {'NumJobCompletions', (tonumber(v.NumJobCompletions) or 0) + 1,
              'CommittedTime', (tonumber(v.CommittedTime) or 0) + wall,
              'CommittedSlotTime', (tonumber(v.CommittedSlotTime) or 0) + wall * cpus})
end

-- End a claim (the job is RUNNING or SUSPENDED): `how` is exit, evict, hold
-- or remove. A pending removal (JobStatus 3) wins over any `how`; a pending
-- hold (JobStatus 5) wins over evict; a pending requeue (FetchworkRequeue)
-- wins over exit and evict and puts the job at the head of its group. `code` and `subcode` (numbers or nil)
-- are the execute side's HoldReasonCode and HoldReasonSubCode for a hold; without
-- a code the hold is the job policy's (3). `outcome` (nil: completed) is the
-- job policy's verdict on an exit (policy_exit.lua): hold, requeue or remove,
-- with `reason`. Returns the new state.
local function settle(key, id, kind, how, reason, code, subcode, outcome)
  -- Raw: a requeue mark is removed only where one is stored.
  local got = hmget_raw(key, {'JobStatus', 'FetchworkRequeue'})
  local status = got[1] and cmsgpack.unpack(got[1])
  local requeue = got[2] and cmsgpack.unpack(got[2])
  if got[2] then hdel(key, 'FetchworkRequeue') end
  leave_claim(key, id)
  if how == 'exit' then
    count_exit(key)
    if outcome == 'remove' then how = 'remove' end
    if outcome == 'hold' then how = 'hold' end
  end
  if how == 'remove' or status == STATUS_REMOVED then
    if not hget_raw(key, 'RemoveReason') then
      setv(key, 'RemoveReason', reason ~= '' and reason or 'removed while running')
    end
    -- Stopped for running past its walltime (overrun.lua): a failure.
    local final = getv(key, 'FetchworkOverrun') and 'FAILED' or 'REMOVED'
    to_history(key, id, kind, final, STATUS_REMOVED)
    return final
  end
  -- Requeued by the user (requeue.lua): back to IDLE at the head of its group.
  if requeue and how ~= 'hold' and status ~= STATUS_HELD then
    setv(key, 'FetchworkOrder', head_of_group(getv(key, 'FetchworkOrder') or 0))
    to_idle(key, id, kind)
    return 'IDLE'
  end
  if how == 'exit' and outcome == 'requeue' and status ~= STATUS_HELD then
    to_idle(key, id, kind, 'reason', reason)
    return 'IDLE'
  end
  if how == 'exit' and outcome ~= 'requeue' then
    to_history(key, id, kind, 'COMPLETED', STATUS_COMPLETED)
    return 'COMPLETED'
  end
  if how == 'hold' or status == STATUS_HELD then
    if status == STATUS_HELD then
      to_held(key, id, kind, nil, nil)
    else
      to_held(key, id, kind, reason ~= '' and reason or 'held by the execute side',
              code or HOLD_JOB_POLICY, code and subcode)
    end
    return 'HELD'
  end
  if rerunnable(key) then
    to_idle(key, id, kind)
    return 'IDLE'
  end
  setv(key, 'RemoveReason', 'not rerunnable: ' .. (reason ~= '' and reason or 'evicted'))
  to_history(key, id, kind, 'FAILED', STATUS_REMOVED)
  return 'FAILED'
end

-- Whether a job waits for the leader's admission: VALIDATING, or in the
-- validating set while its hash still says what the submitter staged (the
-- pool's rules changed between stage.lua and submit.lua, which then made it
-- wait: see submit.lua).
local function awaits_admission(key, id)
  local state = getv(key, 'FetchworkState')
  if state == 'VALIDATING' then return true end
  return (state == 'IDLE' or state == 'BLOCKED' or state == 'HELD')
    and redis.call('ZSCORE', K_VALIDATING, id) ~= false
end

-- An admitted job takes its place: FetchworkOrder becomes -prio * PRIO_SCALE + its
-- sequence; a job submitted on hold is HELD; with scheduling policy limits, a job
-- placed with a BlockedReason is BLOCKED (the leader's policy pass places it);
-- any other is IDLE. One 'admit' event.
local function place_admitted(key, id, prio)
  local seq = tonumber(redis.call('ZSCORE', K_QUEUE, id)) or 0
  setv(key, 'FetchworkOrder', -tonumber(prio) * PRIO_SCALE + seq)
  if getv(key, 'HoldReasonCode') == HOLD_SUBMITTED_ON_HOLD then
    to_held(key, id, 'admit', nil, nil)
  elseif getv(key, 'BlockedReason') then
    set_state(key, 'BLOCKED', STATUS_IDLE)
    event('admit', id, 'BLOCKED', STATUS_IDLE)
  else
    to_idle(key, id, 'admit')
  end
end
