-- read_ads.lua: read several job hashes in one reply (a read, not a
-- transition; it stands alone, without lib.lua).
-- KEYS[1..n] job hashes. No ARGV.
-- Returns one msgpack array (cmsgpack) holding, per key in order, the flat
-- name/value list of HGETALL (empty for a missing job). Values are themselves
-- msgpack, so the client unpacks names and values once each, in C.
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('HGETALL', KEYS[i])
end
return cmsgpack.pack(out)
