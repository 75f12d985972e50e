-- claim.lua: IDLE -> RUNNING for the first of a few jobs the caller matched
-- against its slot (candidates in the caller's priority order); or IDLE ->
-- ACTIVATING when that job has an activation chain (the leader's filters
-- summary says so), and the claim then waits for the leader's verdict.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the candidates'
--   hashes, in ARGV order; then the claim's activation request hash; then the
--   PS ledger (hash: scheduling policy budget -> msgpack array of {job id,
--   walltime end in s, CPUs} of its running jobs); then, on a last-resort
--   claim only, the soft set (see block.lua).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] claim token, ARGV[4]
-- slot name (RemoteHost), ARGV[5] default lease seconds, ARGV[6] the slot ad
-- (msgpack) for an activation chain, '' when the caller saw none configured,
-- ARGV[7..] candidate ids.
-- Only a job still in the idle set is claimed, so no job goes to two slots;
-- a slot reserved for another job, a job reserved for another slot, a job
-- not due for evaluation and a job held back by a block are skipped.
-- Scheduling policy: a job the policy pass gave a budget (FetchworkBudget)
-- is claimed only while its PS (FetchworkCpus x FetchworkWalltime) plus the
-- remaining PS of its budget's running jobs stays within FetchworkPsLimit
-- (0: none), so two slots racing cannot break MAXPS. With the soft set
-- given, a candidate may also be a job BLOCKED only by a soft PS limit (the
-- caller found no IDLE job for its slot); it starts at once, within its hard
-- limit, unless it has an activation chain.
-- A start sets JobStatus 2, RemoteHost, FetchworkClaim, FetchworkLeaseExpiry
-- (s), NumJobMatches + 1 (lease: JobLeaseDuration, else ARGV[5] seconds).
-- An activation writes the request hash (job, slot, slot_ad, index = the
-- job's rank among idle jobs, pass = the pool's activation counter, deadline
-- ms) and puts the job in the activating set until that deadline.
-- Returns cmsgpack of {job id, its ad flat (jobad.lua ad_flat)}, or of {job id,
-- 'activate'}, or nil when no candidate can be claimed.
-- The quiet claim (broker/claim/quiet.py), one call for the common case:
-- ARGV[7] '*groups', ARGV[8] the job hash key prefix, ARGV[9] the
-- autoclusters whose representative matches the slot for all their jobs,
-- ARGV[10] those that cannot match, ARGV[11] those whose jobs must be
-- judged one by one (space-separated ids); KEYS after the pool keys: the
-- activation request hash, the PS ledger, the backfill reservation key.
-- It walks ac:groups best first and claims the head of the first matching
-- autocluster; returns {'job', cmsgpack {job id, its ad flat}}, 'none' when
-- no autocluster with idle jobs matches, {'groups', ids...} (ac:groups from
-- the first one the caller has not judged on) when it must judge more, or
-- 'slow' when the full claim must decide (activation configured, a
-- reservation, a block, a head after the job of a backfill reservation, an
-- index that does not cover the idle set, a job to judge alone, or a head the
-- checks hold back). The backfill reservation (the leader's msgpack record,
-- backfill/plan.py to_record) holds back no job at or before its job in the
-- idle order (claim/backfill.py), and nothing once its job is no longer
-- idle (it started, or left the queue, since the leader's pass).
local token, slot, slot_ad = ARGV[3], ARGV[4], ARGV[6]
local quiet_mode = ARGV[7] == '*groups'
local job_count = quiet_mode and 0 or #ARGV - 6
local request = KEYS[FIRST_JOB_KEY + job_count]
local K_LEDGER, K_SOFT = KEYS[FIRST_JOB_KEY + job_count + 1], KEYS[FIRST_JOB_KEY + job_count + 2]
local reserved = redis.call('HGET', K_RESERVATIONS, slot)
local blocks = redis.call('ZRANGE', K_BLOCKS, 0, 15, 'WITHSCORES')
local summary = redis.call('HMGET', K_FILTERS, 'activate', 'templates', 'wait_ms')

-- Blocks, reservations and re-evaluation times (filters/gate.py may_offer).
local function allowed(key, id, order)
  if reserved and reserved ~= id then return false end
  local mine = getv(key, 'FetchworkReservedSlot')
  if mine and mine ~= slot then return false end
  local after = getv(key, 'FetchworkActivateAfter')
  if type(after) == 'number' and after > NOW then return false end
  local group = group_of(order)
  for b = 1, #blocks, 2 do
    if blocks[b] ~= id and tonumber(blocks[b + 1]) <= group then return false end
  end
  return true
end

-- The cluster-wide chain, or the chain of the job's template (filters/gate.py).
local function needs_activation(key)
  if summary[1] == '1' then return true end
  if not summary[2] or summary[2] == '' then return false end
  local template = getv(key, 'JobTemplate')
  if type(template) ~= 'string' then return false end
  template = string.lower(template)
  for name in string.gmatch(summary[2], '%S+') do
    if name == template then return true end
  end
  return false
end

-- IDLE -> ACTIVATING
local function begin_activation(key, id)
  local wait_ms = tonumber(summary[3]) or 0
  local deadline = NOW + wait_ms
  local index = redis.call('ZRANK', K_IDLE, id)
  idle_remove(key, id)
  redis.call('ZADD', K_ACTIVATING, score(deadline), id)
  local pass = redis.call('HINCRBY', K_FILTERS, 'pass', '1')
  redis.call('HSET', request, 'job', id, 'slot', slot, 'slot_ad', slot_ad, 'index', index,
             'pass', pass, 'deadline', score(deadline))
  redis.call('PEXPIRE', request, wait_ms + 60000)
  setv(key, 'FetchworkClaim', token)
  setv(key, 'FetchworkActivationSlot', slot)
  set_state(key, 'ACTIVATING', STATUS_IDLE)
  event('activate', id, 'ACTIVATING', STATUS_IDLE, 'slot', slot)
  return cmsgpack.pack({id, 'activate'})
end

-- The policy's PS re-check (broker/scheduling/limits.py start_refusal); records the
-- job in its budget's ledger when it may start. Jobs no longer claimed drop out.
local function policy_allows(key, id)
  local budget = getv(key, 'FetchworkBudget')
  if not budget or not K_LEDGER then return true end
  local raw = redis.call('HGET', K_LEDGER, budget)
  local live, used, now_s = {}, 0, NOW / 1000
  for _, entry in ipairs(raw and cmsgpack.unpack(raw) or {}) do
    if redis.call('ZSCORE', K_RUNNING, entry[1]) then
      live[#live + 1] = entry
      used = used + math.max(0, entry[2] - now_s) * entry[3]
    end
  end
  local cpus = tonumber(getv(key, 'FetchworkCpus')) or 1
  local walltime = tonumber(getv(key, 'FetchworkWalltime')) or 0
  local limit = tonumber(getv(key, 'FetchworkPsLimit')) or 0
  local fits = limit <= 0 or used + cpus * walltime <= limit
  if fits then live[#live + 1] = {id, now_s + walltime, cpus} end
  redis.call('HSET', K_LEDGER, budget, cmsgpack.pack(live))
  return fits
end

-- A last-resort candidate: BLOCKED only by a soft PS limit.
local function soft_blocked(key, id)
  return K_SOFT ~= nil and redis.call('ZSCORE', K_SOFT, id) ~= false
    and getv(key, 'FetchworkState') == 'BLOCKED'
end

local function id_set(text)
  local set = {}
  for gid in string.gmatch(text, '%S+') do set[gid] = true end
  return set
end

-- The idle order up to which the backfill reservation in `raw` holds nothing
-- back: +inf when there is none or its job is no longer idle; nil when the
-- record cannot be read here.
local function backfill_bound(raw)
  if not raw then return math.huge end
  local ok, record = pcall(cmsgpack.unpack, raw)
  if not ok or type(record) ~= 'table' or type(record['job']) ~= 'string'
      or type(record['order']) ~= 'number' then
    return nil
  end
  if not redis.call('ZSCORE', K_IDLE, record['job']) then return math.huge end
  return record['order']
end

-- The quiet claim: see the header.
local function quiet_claim()
  local backfill_key = K_SOFT
  if summary[1] == '1' or (summary[2] and summary[2] ~= '') or reserved or #blocks > 0
      or redis.call('ZCARD', K_IDLE) ~= redis.call('ZCARD', K_AC_MEMBERS) then
    return 'slow'
  end
  local bound = backfill_bound(redis.call('GET', backfill_key))
  if not bound then return 'slow' end
  local matching, refusing, judged = id_set(ARGV[9]), id_set(ARGV[10]), id_set(ARGV[11])
  local first, page = 0, 64
  while true do
    local gids = redis.call('ZRANGE', K_AC_GROUPS, first, first + page - 1)
    if #gids == 0 then return 'none' end
    for i, gid in ipairs(gids) do
      if matching[gid] then
        local head = redis.call('ZRANGEBYLEX', K_AC_MEMBERS, '[' .. gid .. '|', '(' .. gid .. '}',
                                'LIMIT', '0', '1')[1]
        local id = head and string.match(head, '^[^|]*|[^|]*|(.*)$')
        if not id then return 'slow' end
        local key = ARGV[8] .. id
        local order = redis.call('ZSCORE', K_IDLE, id)
        if order and tonumber(order) <= bound and allowed(key, id, tonumber(order))
            and not needs_activation(key)
            and policy_allows(key, id) then
          return {'job', start_claim(key, id, token, slot, ARGV[5])}
        end
        return 'slow'
      elseif judged[gid] or gid == '' then
        return 'slow'
      elseif not refusing[gid] then
        local unknown = {'groups'}
        for rest = i, #gids do unknown[#unknown + 1] = gids[rest] end
        return unknown
      end
    end
    first = first + page
  end
end

if quiet_mode then return quiet_claim() end

for i = 7, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 7], ARGV[i]
  local order = redis.call('ZSCORE', K_IDLE, id)
  if order and allowed(key, id, tonumber(order)) then
    if not needs_activation(key) then
      if policy_allows(key, id) then
        return start_claim(key, id, token, slot, ARGV[5])
      end
    elseif slot_ad ~= '' and policy_allows(key, id) then
      return begin_activation(key, id)
    end
  elseif not order and soft_blocked(key, id) and not needs_activation(key)
      and allowed(key, id, tonumber(getv(key, 'FetchworkOrder')) or 0)
      and policy_allows(key, id) then
    redis.call('ZREM', K_SOFT, id)
    hdel(key, 'BlockedReason', 'BlockedBySoftLimit')
    return start_claim(key, id, token, slot, ARGV[5])
  end
end
return nil
