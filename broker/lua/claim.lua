-- claim.lua: IDLE -> RUNNING for the first of a few jobs the caller matched
-- against its slot (candidates in the caller's priority order).
-- KEYS: the pool keys of lib.lua; KEYS[10..] the candidates' hashes, in ARGV
-- order; then the PS ledger (hash: policy budget -> msgpack array of {job id,
-- walltime end in s, CPUs} of its running jobs); then, on a last-resort claim
-- only, the soft set (see block.lua): its candidates are BLOCKED only by a
-- soft PS limit, which a slot no IDLE job can use may still take.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] claim token, ARGV[4]
-- slot name (RemoteHost), ARGV[5] default lease seconds, ARGV[6..] candidate ids.
-- Only a job still in the idle set (or the soft set) is claimed, so no job
-- goes to two slots; a job the policy pass gave a budget (FetchworkBudget) is
-- claimed only while its PS (FetchworkCpus x FetchworkWalltime) plus the
-- remaining PS of its budget's running jobs stays within FetchworkPsLimit
-- (0: none), so no job starts against the policy because two slots raced.
-- Sets JobStatus 2, RemoteHost, FetchworkClaim, FetchworkLeaseExpiry (s),
-- NumJobMatches + 1; the lease is JobLeaseDuration (else ARGV[5]) seconds.
-- Returns cmsgpack of {job id, flat HGETALL of its hash}, or nil when no
-- candidate is idle any more.
local token, slot = ARGV[3], ARGV[4]
local candidates = #ARGV - 5
local K_LEDGER = KEYS[FIRST_JOB_KEY + candidates]
local K_SOFT = KEYS[FIRST_JOB_KEY + candidates + 1]

-- The policy's re-check (broker/policy/limits.py start_refusal); records the
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
  local allowed = limit <= 0 or used + cpus * walltime <= limit
  if allowed then live[#live + 1] = {id, now_s + walltime, cpus} end
  redis.call('HSET', K_LEDGER, budget, cmsgpack.pack(live))
  return allowed
end

local function waiting(key, id)
  if redis.call('ZSCORE', K_IDLE, id) then return true end
  return K_SOFT ~= nil and redis.call('ZSCORE', K_SOFT, id) ~= false
    and getv(key, 'FetchworkState') == 'BLOCKED'
end

for i = 6, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 6], ARGV[i]
  if waiting(key, id) and policy_allows(key, id) then
    redis.call('ZREM', K_IDLE, id)
    if K_SOFT then
      redis.call('ZREM', K_SOFT, id)
      redis.call('HDEL', key, 'BlockedReason', 'BlockedBySoftLimit')
    end
    local expiry = NOW + lease_ms(key, ARGV[5])
    redis.call('ZADD', K_RUNNING, score(expiry), id)
    setv(key, 'RemoteHost', slot)
    setv(key, 'FetchworkClaim', token)
    setv(key, 'FetchworkLeaseExpiry', expiry / 1000)
    setv(key, 'NumJobMatches', (tonumber(getv(key, 'NumJobMatches')) or 0) + 1)
    set_state(key, 'RUNNING', STATUS_RUNNING)
    event('claim', id, 'RUNNING', STATUS_RUNNING, 'slot', slot)
    return cmsgpack.pack({id, redis.call('HGETALL', key)})
  end
end
return nil
