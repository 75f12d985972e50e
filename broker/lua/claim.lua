-- claim.lua: IDLE -> RUNNING for the first of a few jobs the caller matched
-- against its slot (candidates in the caller's priority order).
-- KEYS: the pool keys of lib.lua; KEYS[13..] the candidates' hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] claim token, ARGV[4]
-- slot name (RemoteHost), ARGV[5] default lease seconds, ARGV[6..] candidate ids.
-- Only a job still in the idle set is claimed, so no job goes to two slots.
-- Sets JobStatus 2, RemoteHost, FetchworkClaim, FetchworkLeaseExpiry (s),
-- NumJobMatches + 1; the lease is JobLeaseDuration (else ARGV[5]) seconds.
-- Returns cmsgpack of {job id, flat HGETALL of its hash}, or nil when no
-- candidate is idle any more.
local token, slot = ARGV[3], ARGV[4]
for i = 6, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 6], ARGV[i]
  if redis.call('ZSCORE', K_IDLE, id) then
    redis.call('ZREM', K_IDLE, id)
    ac_remove(key, id)
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
