-- stage.lua: write the hashes of a batch of new jobs of one cluster; they are
-- in no index yet, so nothing sees them until submit.lua queues them.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the new jobs' hashes, in batch order.
-- ARGV[1] now ms or '', ARGV[2] events cap,
-- ARGV[3] cluster number, ARGV[4] submission nonce (every batch of one
--   submission carries the same nonce; a cluster owned by another nonce, or
--   one never handed out by counter:cluster, is refused before any write),
-- ARGV[5] the batch: one msgpack array (old-spec raw strings, as cmsgpack
--   reads them) of runs of jobs, in job order: {shared, {own, own, ...}, linked},
--   where `shared` holds the fields the run's jobs share and each `own` one
--   job's other fields, both as {name, packed value, name, packed value, ...}.
--   `linked` is true for the run whose shared fields are the cluster's
--   (jobad.lua): they are stored once, in the cluster hash, and its jobs'
--   hashes hold their own fields and the link; other runs' jobs hold all.
-- When the leader's filters summary says submit = 1 (submission filters or job
-- templates), each job is VALIDATING (JobStatus 1) until the leader's verdict.
-- Returns {number of hashes written, 'validating' or ''}, or an error reply.
local cluster, nonce = ARGV[3], ARGV[4]
local owner = redis.call('HGET', K_CLUSTERS, cluster)
if owner and owner ~= nonce then
  return redis.error_reply('cluster ' .. cluster .. ' already holds jobs of another submission')
end
if not owner then
  if tonumber(cluster) > tonumber(redis.call('GET', K_CLUSTER_COUNTER) or '0') then
    return redis.error_reply('cluster ' .. cluster .. ' was never allocated')
  end
  redis.call('HSET', K_CLUSTERS, cluster, nonce)
end
local runs = cmsgpack.unpack(ARGV[5])
local validate = redis.call('HGET', K_FILTERS, 'submit') == '1'
local ckey = cluster_key(KEYS[FIRST_JOB_KEY])
local written, linked = 0, 0
for r = 1, #runs do
  -- One table per run: the shared fields, then each job's own in turn.
  local fields, jobs, link = runs[r][1], runs[r][2], runs[r][3]
  if link then
    -- The cluster ad: written once (a batch staged again finds it).
    if redis.call('EXISTS', ckey) == 0 then
      hset_chunked(ckey, fields, 1, #fields)
      if validate then set_state(ckey, 'VALIDATING', STATUS_IDLE) end
    end
    fields = {JOB_LINK, ''}
  end
  local base = #fields
  for j = 1, #jobs do
    local key = KEYS[FIRST_JOB_KEY + written]
    local own = jobs[j]
    for i = 1, #own do fields[base + i] = own[i] end
    for i = base + #own + 1, #fields do fields[i] = nil end
    local added = hset_chunked(key, fields, 1, #fields)
    if link then
      -- A hash staged again adds no field: its proc is counted once.
      if added > 0 then linked = linked + 1 end
    elseif validate then
      set_state(key, 'VALIDATING', STATUS_IDLE)
    end
    written = written + 1
  end
end
if linked > 0 then
  redis.call('HSET', ckey, CLUSTER_PROCS,
             (tonumber(redis.call('HGET', ckey, CLUSTER_PROCS)) or 0) + linked)
end
return {written, validate and 'validating' or ''}
