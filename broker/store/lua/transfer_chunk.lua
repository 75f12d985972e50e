-- transfer_chunk.lua: store one chunk of an upload (transfer/chunks.py), unless the
-- pool holds it already. A new chunk is pending: it carries a TTL until a manifest
-- that holds it is attached (transfer_attach.lua), so an upload that never finishes
-- leaves nothing behind; a pending chunk met again gets its TTL renewed, so an
-- upload resumed later keeps what the first attempt sent.
-- KEYS[1] the chunk's key (xfer:chunk:<sha256>)
-- KEYS[2] xfer:chunkrefs  hash sha256 -> how many manifests hold it
-- ARGV[1] the chunk's sha256 (hex), verified by the caller against ARGV[2]
-- ARGV[2] the chunk's bytes
-- ARGV[3] how long a pending chunk is kept (ms)
-- ARGV[4] 'ask' (optional): store nothing; the caller sends a chunk the pool lacks
--         itself, with SET <key> <bytes> PX <ARGV[3]> NX (a chunk of a few MiB
--         passed through a script is copied twice more and costs Redis twice the
--         time of a plain SET; ARGV[2] is then empty)
-- Returns 1 when the bytes were stored, 0 when the pool had the chunk, -1 when it
-- lacks the chunk and ARGV[4] is 'ask'.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if not redis.call('HGET', KEYS[2], ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return 0
end
if ARGV[4] == 'ask' then
  return -1
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
