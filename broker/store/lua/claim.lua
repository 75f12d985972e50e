-- claim.lua: IDLE -> RUNNING for the first of a few jobs the caller matched
-- against its slot (candidates in the caller's priority order); or IDLE ->
-- ACTIVATING when that job has an activation chain (the leader's filters
-- summary says so), and the claim then waits for the leader's verdict.
-- The full claim's step (broker/claim/claimer.py); the one-call claim of the
-- common case is claim_quiet.lua. Runs with claims.lua (the checks both share).
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
local token, slot, lease_s, slot_ad = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local job_count = #ARGV - 6
local K_REQUEST = KEYS[FIRST_JOB_KEY + job_count]
local K_LEDGER = KEYS[FIRST_JOB_KEY + job_count + 1]
local K_SOFT = KEYS[FIRST_JOB_KEY + job_count + 2]
local view = claim_view(slot)

-- IDLE -> ACTIVATING
local function begin_activation(key, id)
  local wait_ms = tonumber(view.summary[3]) or 0
  local deadline = NOW + wait_ms
  local index = redis.call('ZRANK', K_IDLE, id)
  idle_remove(key, id)
  redis.call('ZADD', K_ACTIVATING, score(deadline), id)
  local pass = redis.call('HINCRBY', K_FILTERS, 'pass', '1')
  redis.call('HSET', K_REQUEST, 'job', id, 'slot', slot, 'slot_ad', slot_ad, 'index', index,
             'pass', pass, 'deadline', score(deadline))
  redis.call('PEXPIRE', K_REQUEST, wait_ms + 60000)
  setv(key, 'FetchworkClaim', token)
  setv(key, 'FetchworkActivationSlot', slot)
  set_state(key, 'ACTIVATING', STATUS_IDLE)
  event('activate', id, 'ACTIVATING', STATUS_IDLE, 'slot', slot)
  return cmsgpack.pack({id, 'activate'})
end

-- A last-resort candidate: BLOCKED only by a soft PS limit.
local function soft_blocked(key, id)
  return K_SOFT ~= nil and redis.call('ZSCORE', K_SOFT, id) ~= false
    and getv(key, 'FetchworkState') == 'BLOCKED'
end

for i = 7, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 7], ARGV[i]
  local order = redis.call('ZSCORE', K_IDLE, id)
  if order and allowed(view, key, id, tonumber(order)) then
    if not needs_activation(view, key) then
      if policy_allows(K_LEDGER, key, id) then
        return start_claim(key, id, token, slot, lease_s)
      end
    elseif slot_ad ~= '' and policy_allows(K_LEDGER, key, id) then
      return begin_activation(key, id)
    end
  elseif not order and soft_blocked(key, id) and not needs_activation(view, key)
      and allowed(view, key, id, tonumber(getv(key, 'FetchworkOrder')) or 0)
      and policy_allows(K_LEDGER, key, id) then
    redis.call('ZREM', K_SOFT, id)
    hdel(key, 'BlockedReason', 'BlockedBySoftLimit')
    return start_claim(key, id, token, slot, lease_s)
  end
end
return nil
