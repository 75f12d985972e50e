-- sigbatch.lua: a signed job's FetchworkSignature, rebuilt from what its batch
-- stores once (a library part: store/scripts.py puts it after lib.lua and before
-- jobstates.lua, whose start_claim hands the signature's parts out with the job).
--
-- The leader signs jobs a batch at a time (config/signedjob.py) and stores, per
-- batch n, under the pool's prefix P = "fw:{pool}:":
--   P.."sig:<n>"       string  the root's Ed25519 signature (64 bytes), then
--                              "<batch id>:<jobs in batch>:16" (a v3 tree, 16
--                              children a node) or "<batch id>:<jobs in batch>" (v2,
--                              binary, stored before v3) padded with spaces to
--                              byte 160, then every level of the hash tree from
--                              the leaves up (not the root), 32 bytes a node
--   P.."sig:<n>:jobs"  string  the batch's jobs that may still be queued, as runs
--                              "<cluster>.<first proc>-<last proc>" (sig_sweep.lua)
--   P.."sigbatches"    set     the numbers of the batches stored
--   P.."sigcount"      string  the last batch number handed out
-- and each job's hash holds SIG_REF = "<n>:<leaf index>" (raw, short enough that a
-- job hash keeps Redis's compact encoding). Only the leader writes these keys
-- (admit_signed.lua, sig_sweep.lua); a job's hash is writable by the execute role,
-- so SIG_REF may be changed, but the proof it then yields is another leaf's and the
-- starter's check refuses the job.

local SIG_REF = '#s'
local SIG_HEADER, SIG_BYTES, SIG_NODE = 160, 64, 32
-- The flat ad's field that carries a rebuilt signature's parts (a '#' name is never
-- an attribute): "<version>:<batch id>:<count>:<index>:", the root's 64 signature
-- bytes, then the proof's nodes, all raw. The claim's reader (store/codec.py
-- decode_flat) writes them as FetchworkSignature, its two binary parts in base64:
-- that encoding took a third of a claim's time in Redis when done here in Lua, and
-- is a few microseconds in the caller's C library.
local SIG_PARTS = '#sig'

-- The parts of job hash `key`'s FetchworkSignature (SIG_PARTS) from its batch's
-- string (what signedjob.proof_text makes of it: v3 for a 16-wide tree, v2 for a
-- binary one), or nil when the job names no stored batch. At each level the proof
-- is the other nodes of the job's group, read with one GETRANGE.
local function batch_signature_parts(key)
  local ref = redis.call('HGET', key, SIG_REF)
  if not ref then return nil end
  local number, index = string.match(ref, '^(%d+):(%d+)$')
  if not number then return nil end
  local bkey = string.sub(K_QUEUE, 1, #K_QUEUE - #'queue') .. 'sig:' .. number
  local head = redis.call('GETRANGE', bkey, 0, SIG_HEADER - 1)
  if #head < SIG_HEADER then return nil end
  local label = string.sub(head, SIG_BYTES + 1)
  local version, arity = 'v2', 2
  local batch_id, count = string.match(label, '^([A-Za-z0-9_.-]+):(%d+):16 *$')
  if batch_id then
    version, arity = 'v3', 16
  else
    batch_id, count = string.match(label, '^([A-Za-z0-9_.-]+):(%d+) *$')
  end
  if not batch_id then return nil end
  index, count = tonumber(index), tonumber(count)
  if index >= count then return nil end
  local path, pos, size, offset = {}, index, count, SIG_HEADER
  while size > 1 do
    local start = pos - pos % arity
    local width = math.min(arity, size - start)
    if width > 1 then
      local at = offset + start * SIG_NODE
      local group = redis.call('GETRANGE', bkey, at, at + width * SIG_NODE - 1)
      if #group ~= width * SIG_NODE then return nil end
      local cut = (pos - start) * SIG_NODE
      path[#path + 1] = string.sub(group, 1, cut) .. string.sub(group, cut + SIG_NODE + 1)
    end
    offset = offset + size * SIG_NODE
    pos, size = math.floor(pos / arity), math.floor((size + arity - 1) / arity)
  end
  return version .. ':' .. batch_id .. ':' .. count .. ':' .. index .. ':' ..
    string.sub(head, 1, SIG_BYTES) .. table.concat(path)
end

-- A job's flat ad (ad_flat) as it is handed to an execute machine: with the parts
-- of its FetchworkSignature rebuilt from its batch (SIG_PARTS), unless it stores one
-- of its own (signed alone, or queued before batches were stored apart).
local function with_signature(key, flat)
  for i = 1, #flat, 2 do
    if flat[i] == 'FetchworkSignature' then return flat end
  end
  local parts = batch_signature_parts(key)
  if parts then
    flat[#flat + 1] = SIG_PARTS
    flat[#flat + 1] = parts
  end
  return flat
end
