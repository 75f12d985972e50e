-- transfer_attach.lua: `n` jobs come to need manifest `id` (an input sandbox at
-- submit, or an output sandbox a run returned). A manifest new to the pool is
-- stored when every chunk it names is there and the pool's cap allows its new
-- bytes; its chunks then gain a reference each and lose their TTL. The key
-- layout is described in transferrefs.lua.
-- KEYS[1] xfer:manifest:<id>   KEYS[2] xfer:refs   KEYS[3] xfer:chunkrefs
-- KEYS[4] xfer:bytes           KEYS[5] xfer:outputs
-- KEYS[6..] the keys of the manifest's distinct chunks, in ARGV[8..]'s order
-- ARGV[1] the manifest id          ARGV[2] the packed manifest
-- ARGV[3] n, how many jobs need it
-- ARGV[4] the pool's cap in bytes (0: none)
-- ARGV[5] for an output sandbox, the job that returned it ('' for inputs)
-- ARGV[6] for an output sandbox, when it expires (s)
-- ARGV[7] bytes of the files carried inside the manifest (transfer/inline.py):
--         counted against the cap with its chunks, kept as the manifest's
--         'inline' field and given back when it is freed
-- ARGV[8..] the distinct chunk digests (sha256 hex)
-- Returns {1, new bytes} when attached; {0, missing digests...} when chunks are
-- missing (nothing changed: upload them and call again); {-1, bytes held, new
-- bytes} when the cap refuses it (nothing changed).
local id, n, cap = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local function mark_output()
  if ARGV[5] ~= '' then
    redis.call('ZADD', KEYS[5], ARGV[6], ARGV[5] .. '|' .. id)
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[2], id, n)
  mark_output()
  return {1, 0}
end
local missing = {0}
local inline = tonumber(ARGV[7]) or 0
local new_bytes = inline
for i = 6, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    missing[#missing + 1] = ARGV[i + 2]
  elseif not redis.call('HGET', KEYS[3], ARGV[i + 2]) then
    new_bytes = new_bytes + redis.call('STRLEN', KEYS[i])
  end
end
if #missing > 1 then return missing end
local held = tonumber(redis.call('GET', KEYS[4]) or '0')
if cap > 0 and held + new_bytes > cap then
  return {-1, held, new_bytes}
end
local digests = {}
for i = 6, #KEYS do
  local digest = ARGV[i + 2]
  digests[#digests + 1] = digest
  if redis.call('HINCRBY', KEYS[3], digest, 1) == 1 then
    redis.call('PERSIST', KEYS[i])
  end
end
redis.call('INCRBY', KEYS[4], new_bytes)
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'chunks', table.concat(digests, ' '))
if inline > 0 then
  redis.call('HSET', KEYS[1], 'inline', inline)
end
redis.call('HINCRBY', KEYS[2], id, n)
mark_output()
return {1, new_bytes}
