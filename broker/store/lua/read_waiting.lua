-- read_waiting.lua: the head of the validating set and what signed admission reads of
-- its jobs, in one call (a read, not a transition; it runs with jobad.lua and
-- packads.lua, without lib.lua). A leader whose admission is only signing
-- (broker/filters/leader.py) reads its first batch with it in its pass's first
-- round trip, where it would read the head's ids alone and then their ads.
-- KEYS[1] validating (zset: VALIDATING jobs, score = submission sequence),
-- KEYS[2] queue (zset: unfinished jobs, score = submission sequence).
-- ARGV[1] how many jobs to take from the head of the validating set.
-- The job and cluster hashes (jobad.lua) and the staged digests (staged:<ClusterId>,
-- a hash ProcId -> digest: broker/filters/signing.py) are named here from the prefix
-- of KEYS[1]; they carry the pool's hash tag, so they live in its Redis Cluster slot.
-- Returns an array: the ids taken (lowest score first), then, when there are any,
-- the replies store/batchads.py queue_reads and filters/signing.py queue_staged
-- would get for them in a pipeline: the ads as read_ads.lua's 'split' mode gives
-- them (packads.lua split_ads), the jobs' scores in the queue (ZMSCORE: nil for a
-- job not queued), and per cluster (in the order of its first job) the staged
-- digests of its jobs (HMGET: nil where there is none).
local P = string.sub(KEYS[1], 1, #KEYS[1] - #'validating')
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return {ids} end
local keys, clusters, procs = {}, {}, {}
for i, id in ipairs(ids) do
  keys[i] = P .. 'job:' .. id
  local cluster, proc = string.match(id, '^([^.]*)%.(.*)$')
  if not cluster then cluster, proc = id, '' end
  if not procs[cluster] then
    procs[cluster] = {}
    clusters[#clusters + 1] = cluster
  end
  procs[cluster][#procs[cluster] + 1] = proc
end
local out = {ids, split_ads(keys), redis.call('ZMSCORE', KEYS[2], unpack(ids))}
for _, cluster in ipairs(clusters) do
  out[#out + 1] = redis.call('HMGET', P .. 'staged:' .. cluster, unpack(procs[cluster]))
end
return out
