-- renew.lua: extend a claimed job's lease and store measured attributes;
-- RUNNING <-> SUSPENDED when asked.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
-- token, ARGV[5] default lease seconds, ARGV[6] '1' suspended, '0' running,
-- '' unchanged, ARGV[7..] attribute name/packed-value pairs.
-- Returns 'gone' (no such job, or the claim is not the caller's), 'removed'
-- or 'held' (the job was removed or held meanwhile: the caller should stop
-- it and call finish; the lease is not extended), 'requeued' (the user
-- requeued it: the caller should vacate it; the lease is extended), else 'ok'.
-- A job with a UserLog whose ImageSize grew gets an 'image' event (field
-- size: the new ImageSize in KB) for its user log's 006 event.
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
local state = own_claim(key, ARGV[4])
if not state then return 'gone' end
local logged = hget_raw(key, 'UserLog') ~= false
local old_size = logged and getv(key, 'ImageSize')
store_attrs(key, 7, #ARGV)
local status = getv(key, 'JobStatus')
if status == STATUS_REMOVED then return 'removed' end
if status == STATUS_HELD then return 'held' end
local expiry = NOW + lease_ms(key, ARGV[5])
redis.call('ZADD', K_RUNNING, score(expiry), id)
setv(key, 'FetchworkLeaseExpiry', expiry / 1000)
if ARGV[6] == '1' and state == 'RUNNING' then
  set_state(key, 'SUSPENDED', STATUS_SUSPENDED)
  event('suspend', id, 'SUSPENDED', STATUS_SUSPENDED)
elseif ARGV[6] == '0' and state == 'SUSPENDED' then
  set_state(key, 'RUNNING', STATUS_RUNNING)
  event('continue', id, 'RUNNING', STATUS_RUNNING)
end
if logged then
  local size = getv(key, 'ImageSize')
  if type(size) == 'number' and (type(old_size) ~= 'number' or size > old_size) then
    event('image', id, getv(key, 'FetchworkState'), getv(key, 'JobStatus'), 'size',
          string.format('%d', size))
  end
end
if getv(key, 'FetchworkRequeue') then return 'requeued' end
return 'ok'
