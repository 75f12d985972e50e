-- bypass.lua: BypassCount grows on a job the leader's backfill pass reserved
-- for, by the number of lower jobs that started ahead of it (Maui's bypass
-- count), while the job still waits.
-- KEYS[1] the job's hash (msgpack values; runs with jobad.lua).
-- ARGV[1] how many jobs started ahead of it since the previous pass.
-- Returns the new BypassCount, or nil when the job is no longer IDLE.
local state = hget_raw(KEYS[1], 'FetchworkState')
if not state or cmsgpack.unpack(state) ~= 'IDLE' then return nil end
local old = hget_raw(KEYS[1], 'BypassCount')
local count = (old and tonumber(cmsgpack.unpack(old)) or 0) + tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'BypassCount', cmsgpack.pack(count))
return count
