-- jobad.lua: a job's ad is its proc hash over its cluster ad. store/scripts.py puts
-- this text in front of every script that reads or writes job hashes.
--
-- As HTCondor's schedd does (a cluster ad holds what the procs of a
-- submission share, each proc ad only its own attributes and what differs),
-- the attributes a submission's jobs share are stored once, in
--   fw:{P}:cluster:<ClusterId>  hash  shared attributes (msgpack values) and
--                                     '#procs', the number of linked procs,
-- and each job hash fw:{P}:job:<ClusterId>.<ProcId> holds its own attributes,
-- plus the field '#c' while it is linked to the cluster hash. A linked job's
-- ProcId, GlobalJobId and FetchworkOrder are derived (DERIVED) unless it
-- stores its own: ProcId from its key; GlobalJobId from the cluster hash's
-- '#gjid', what it has before and after the job id as "<before>\n<after>";
-- FetchworkOrder, -JobPrio * PRIO_SCALE + its submission sequence
-- (states.idle_order), from the cluster hash's '#order' (the first part) plus
-- its score in the queue set (the sequence; a job is unlinked before it leaves
-- the queue). Fields whose
-- names start with '#' are bookkeeping, never attributes (ClassAd names
-- cannot start with '#'). The cluster key is made from the job key here: both
-- carry the pool's hash tag, so they live in one Redis Cluster slot.
--
-- Reads go through hget_raw, hmget_raw and ad_flat: a field the job hash
-- lacks falls back to the cluster hash while the job is linked. Writes go to
-- the job hash only (an override). Removing a field the cluster hash holds
-- copies the cluster's fields into the job hash first and unlinks it
-- (copy-on-delete, see detach): a removal is rare (dependencies resolved, a
-- filter's rewrite, a case change of a name), and so no reader has to know of
-- deleted markers. A job that leaves the queue is unlinked the same way, so
-- history keeps its full ad; the last unlinked proc deletes the cluster hash.

local JOB_LINK = '#c'
local CLUSTER_PROCS = '#procs'
local CLUSTER_GJID, CLUSTER_ORDER = '#gjid', '#order'
local BOOKKEEPING = 35  -- '#'
local DERIVED = {'ProcId', 'GlobalJobId', 'FetchworkOrder'}
local IS_DERIVED = {ProcId = true, GlobalJobId = true, FetchworkOrder = true}

local function cluster_key(key)
  local prefix, cluster = string.match(key, '^(.*)job:(%d+)%.%d+$')
  if not prefix then return nil end
  return prefix .. 'cluster:' .. cluster
end

-- Derived attribute `name` of a job linked to cluster hash `ckey`, packed;
-- `book` (optional) holds the cluster hash's bookkeeping fields already read.
local function derived(key, ckey, name, book)
  if name == 'ProcId' then
    return cmsgpack.pack(tonumber(string.match(key, '%.(%d+)$')))
  end
  if name == 'FetchworkOrder' then
    local base
    if book then base = book[CLUSTER_ORDER] else base = redis.call('HGET', ckey, CLUSTER_ORDER) end
    local prefix, id = string.match(key, '^(.*)job:([^:]*)$')
    local seq = base and redis.call('ZSCORE', prefix .. 'queue', id)
    if not seq then return false end
    return cmsgpack.pack(tonumber(base) + tonumber(seq))
  end
  local parts
  if book then parts = book[CLUSTER_GJID] else parts = redis.call('HGET', ckey, CLUSTER_GJID) end
  if not parts then return false end
  local before, after = string.match(parts, '^([^\n]*)\n(.*)$')
  return cmsgpack.pack(before .. string.match(key, 'job:([^:]*)$') .. after)
end

-- A field of the job's ad as stored (packed), or false.
local function hget_raw(key, name)
  local got = redis.call('HMGET', key, name, JOB_LINK)
  if got[1] or not got[2] then return got[1] end
  local ckey = cluster_key(key)
  if IS_DERIVED[name] then return derived(key, ckey, name) end
  return redis.call('HGET', ckey, name)
end

-- Fields `names` (a table) of the job's ad as stored, false where absent.
-- `clusters` (optional, a table kept across the jobs of one call that all ask for
-- the same `names`) keeps each cluster hash's values of `names`, read once.
local function hmget_raw(key, names, clusters)
  local n = #names
  names[n + 1] = JOB_LINK
  local got = redis.call('HMGET', key, unpack(names))
  names[n + 1] = nil
  local linked = got[n + 1]
  got[n + 1] = nil
  if not linked then return got end
  -- What the job lacks: derived here, or read from the cluster hash in one HMGET.
  local ckey = cluster_key(key)
  local missing, wanted = {}, {}
  for i = 1, n do
    if not got[i] and IS_DERIVED[names[i]] then
      got[i] = derived(key, ckey, names[i])
    elseif not got[i] then
      missing[#missing + 1] = i
      wanted[#wanted + 1] = names[i]
    end
  end
  if #wanted == 0 then return got end
  if clusters then
    local shared = clusters[ckey]
    if not shared then
      shared = redis.call('HMGET', ckey, unpack(names))
      clusters[ckey] = shared
    end
    for _, i in ipairs(missing) do got[i] = shared[i] end
  else
    local shared = redis.call('HMGET', ckey, unpack(wanted))
    for m, i in ipairs(missing) do got[i] = shared[m] end
  end
  return got
end

local function is_attr(name)
  return string.byte(name) ~= BOOKKEEPING
end

-- Append to `out` the cluster's attributes that the job (its own field names
-- `seen`) does not override, derived ones included: {name, packed value, ...}.
-- `clusters` (optional, a table kept across the jobs of one call) keeps each
-- cluster hash read, so the jobs of one cluster read it once.
local function shared_fields(key, seen, out, clusters)
  local ckey = cluster_key(key)
  local shared, book
  if clusters then
    local kept = clusters[ckey]
    if not kept then
      kept = {redis.call('HGETALL', ckey), {}}
      for i = 1, #kept[1], 2 do
        if not is_attr(kept[1][i]) then kept[2][kept[1][i]] = kept[1][i + 1] end
      end
      clusters[ckey] = kept
    end
    shared, book = kept[1], kept[2]
  else
    shared = redis.call('HGETALL', ckey)
  end
  for i = 1, #shared, 2 do
    local name = shared[i]
    if not seen[name] and is_attr(name) then
      out[#out + 1] = name
      out[#out + 1] = shared[i + 1]
    end
  end
  for _, name in ipairs(DERIVED) do
    if not seen[name] then
      local value = derived(key, ckey, name, book)
      if value then
        out[#out + 1] = name
        out[#out + 1] = value
      end
    end
  end
end

-- The job's whole ad as a flat {name, packed value, ...}: the cluster's
-- attributes the job does not override, then the job's own; {} for no job.
local function ad_flat(key, clusters)
  local own = redis.call('HGETALL', key)
  local linked, seen = false, {}
  for i = 1, #own, 2 do
    seen[own[i]] = true
    if own[i] == JOB_LINK then linked = true end
  end
  local out = {}
  if linked then shared_fields(key, seen, out, clusters) end
  for i = 1, #own, 2 do
    if is_attr(own[i]) then
      out[#out + 1] = own[i]
      out[#out + 1] = own[i + 1]
    end
  end
  return out
end

-- `command` on `key` with flat[first..last], `step` items a call (unpack
-- has a limit on how many values it returns); the sum of the replies (fields
-- or members added or removed).
local function call_chunked(command, key, flat, first, last, step)
  local i, total = first, 0
  while i <= last do
    local stop = math.min(i + step - 1, last)
    total = total + redis.call(command, key, unpack(flat, i, stop))
    i = stop + 1
  end
  return total
end

-- Unlink a job from its cluster hash: the cluster's attributes it does not
-- override are copied into its own hash; the cluster hash goes with its last
-- linked proc.
local function detach(key)
  local seen = {}
  for _, name in ipairs(redis.call('HKEYS', key)) do seen[name] = true end
  if not seen[JOB_LINK] then return end
  local ckey = cluster_key(key)
  local copy = {}
  shared_fields(key, seen, copy)
  call_chunked('HSET', key, copy, 1, #copy, 200)
  redis.call('HDEL', key, JOB_LINK)
  local left = (tonumber(redis.call('HGET', ckey, CLUSTER_PROCS)) or 1) - 1
  if left > 0 then
    redis.call('HSET', ckey, CLUSTER_PROCS, left)
  else
    redis.call('DEL', ckey)  -- the last linked proc: no one reads the cluster hash now
  end
end

-- Remove fields from the job's ad (HDEL's arguments); a field the cluster
-- hash holds unlinks the job first, so the field is gone for it alone.
local function hdel(key, ...)
  local names = {...}
  if redis.call('HGET', key, JOB_LINK) then
    local shared = redis.call('HMGET', cluster_key(key), unpack(names))
    for i = 1, #names do
      if shared[i] or IS_DERIVED[names[i]] then
        detach(key)
        break
      end
    end
  end
  return redis.call('HDEL', key, unpack(names))
end

-- The names of the job's ad: {lower-case name = stored name}, and the
-- lower-case names that come from the cluster hash.
local function ad_names(key)
  local names, from_cluster = {}, {}
  local linked = false
  for _, name in ipairs(redis.call('HKEYS', key)) do
    if name == JOB_LINK then linked = true end
    names[string.lower(name)] = name
  end
  if linked then
    local shared = redis.call('HKEYS', cluster_key(key))
    for _, name in ipairs(DERIVED) do shared[#shared + 1] = name end
    for _, name in ipairs(shared) do
      local lower = string.lower(name)
      if not names[lower] and is_attr(name) then
        names[lower] = name
        from_cluster[lower] = true
      end
    end
  end
  return names, from_cluster
end
