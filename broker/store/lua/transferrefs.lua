-- transferrefs.lua: the reference counts of transferred files (a library part:
-- store/scripts.py puts it before jobstates.lua in every transition script, and
-- before the transfer scripts that stand alone).
--
-- A pool stores files as content-addressed chunks (transfer/chunks.py). A
-- manifest lists the files of one input or output sandbox and the chunks they
-- are made of; it is named by the SHA-256 of its packed text, so equal sandboxes
-- are stored once. The keys, all under the pool's prefix P = "fw:{pool}:":
--   P.."xfer:chunk:<sha256>"   string  one chunk's bytes; unreferenced chunks (an
--                              upload not attached yet) carry a TTL, referenced none
--   P.."xfer:chunkrefs"        hash    sha256 -> how many manifests hold the chunk
--   P.."xfer:manifest:<id>"    hash    'data' the packed manifest, 'chunks' its
--                              distinct chunk digests joined by spaces, 'inline'
--                              the bytes of the small files inside it (if any)
--   P.."xfer:refs"             hash    manifest id -> how many jobs need it
--   P.."xfer:bytes"            string  bytes of all referenced chunks and inline
--                              files (the pool cap)
--   P.."xfer:outputs"          zset    "<job id>|<manifest id>" of outputs not yet
--                              delivered, score = when they expire (s)
-- Keys found only here are made from the prefix of a declared key, so they stay
-- in the pool's hash slot.

local function xfer_split(text)
  local words = {}
  for word in string.gmatch(text or '', '%S+') do words[#words + 1] = word end
  return words
end

-- Drop `n` of the references jobs hold on manifest `id`; at none, the manifest goes
-- (its inline bytes leave the pool's count) and each of its chunks loses one
-- reference (a chunk at none is deleted and its bytes leave the pool's count). Returns the references left (0 when freed).
local function xfer_release(prefix, id, n)
  if not id or id == '' then return 0 end
  local refs_key = prefix .. 'xfer:refs'
  local left = redis.call('HINCRBY', refs_key, id, -n)
  if left > 0 then return left end
  redis.call('HDEL', refs_key, id)
  local manifest = prefix .. 'xfer:manifest:' .. id
  local chunks, inline = unpack(redis.call('HMGET', manifest, 'chunks', 'inline'))
  redis.call('DEL', manifest)
  if inline then
    redis.call('DECRBY', prefix .. 'xfer:bytes', inline)
  end
  local chunkrefs = prefix .. 'xfer:chunkrefs'
  for _, digest in ipairs(xfer_split(chunks)) do
    if redis.call('HINCRBY', chunkrefs, digest, -1) <= 0 then
      redis.call('HDEL', chunkrefs, digest)
      local chunk = prefix .. 'xfer:chunk:' .. digest
      redis.call('DECRBY', prefix .. 'xfer:bytes', redis.call('STRLEN', chunk))
      redis.call('DEL', chunk)
    end
  end
  return 0
end
