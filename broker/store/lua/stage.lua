-- stage.lua: write the hashes of a batch of new jobs of one cluster, checked
-- against the pool's rules; they are in no index yet, so nothing sees them
-- until submit.lua queues them.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the new jobs' hashes, in batch
--   order; KEYS[#KEYS - 1] the cluster's staged-digest hash (keys.staged); the last
--   KEYS[#KEYS] the pool's settings hash (store/poolrules.py).
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
-- ARGV[6] (may be absent) the batch's staged digests: 32 bytes per job, in job
--   order (config/signedjob.py staged_digest). When the batch waits for the
--   leader, each job's digest is stored under its ProcId in the staged-digest
--   hash, a key the execute role cannot write: a pool that signs admits a job
--   only while its signed attributes still give that digest, so a job rewritten
--   while it waits is refused, not signed (filters/signing.py).
-- ARGV[7], ARGV[8] (may be absent or ''): a submission of this one batch is
--   also queued by this call, one round trip instead of two: ARGV[7] packs the
--   batch as submit.lua's ARGV[3] does and ARGV[8] its autoclusters as
--   submit.lua's ARGV[5]; once the batch is staged, queueing.lua's queue_batch
--   queues it with the mode this call answers, as submit.lua would have. A
--   refused batch is neither written nor queued. A call run again after its
--   reply was lost finds its batch queued and changes nothing (the jobs may
--   have moved on since: their hashes are not written again).
-- The pool's rules are the ones its leader published in the settings hash,
-- never the caller's: with none published (the leader has not run yet) or
-- with submission filters or job templates (`filtered`), each job is
-- VALIDATING (JobStatus 1) until the leader admits it; else a job asking for
-- more than MAX_WALLTIME (AllowedJobDuration when a positive number, else
-- DEFAULT_JOB_WALLTIME) or with more attributes of its own than
-- SUBMIT_MAX_JOB_ATTRS refuses the batch before any write, and with
-- scheduling limits (`limits`) an IDLE job starts BLOCKED with the published
-- BlockedReason until the leader's policy pass places it.
-- Returns {number of hashes written, the batch's mode: 'validating', 'blocked'
-- or ''}, and with ARGV[7] a third item, the number of jobs queued; or an error
-- reply naming the job and the rule.
local cluster, nonce = ARGV[3], ARGV[4]
local owner = redis.call('HGET', K_CLUSTERS, cluster)
if owner and owner ~= nonce then
  return redis.error_reply('cluster ' .. cluster .. ' already holds jobs of another submission')
end
if not owner and tonumber(cluster) > tonumber(redis.call('GET', K_CLUSTER_COUNTER) or '0') then
  return redis.error_reply('cluster ' .. cluster .. ' was never allocated')
end
local K_SETTINGS, K_STAGED = KEYS[#KEYS], KEYS[#KEYS - 1]
local digests = ARGV[6] or ''
local rules = redis.call('HMGET', K_SETTINGS, 'version', 'filtered', 'max_walltime_s',
                         'default_walltime_s', 'limits', 'max_job_attrs', 'blocked_reason')
local published = rules[1] ~= false
local validate = not published or rules[2] == '1'
local block = not validate and rules[5] == '1'
local runs = cmsgpack.unpack(ARGV[5])
local queue = ARGV[7] and ARGV[7] ~= '' and cmsgpack.unpack(ARGV[7])
if queue and owner == nonce and queued_before(queue) then
  return {0, validate and 'validating' or (block and 'blocked' or ''), 0}
end

-- The pool's checks, before any write: the first job that breaks a rule refuses
-- the batch (the caller deletes what earlier batches staged).
if published then
  local max_wall = tonumber(rules[3]) or 0
  local default_wall = tonumber(rules[4]) or 0
  local max_attrs = tonumber(rules[6])
  -- What a job's own fields hold for a submitter that is not lying: the names of
  -- submission/shape.py's PER_JOB and the autocluster, none of them counted.
  local PER_JOB = {ProcId = true, GlobalJobId = true, FetchworkOrder = true,
                   [AUTOCLUSTER_ATTR] = true}
  local function counted(name)
    return string.byte(name) ~= BOOKKEEPING and not RULE_UNCOUNTED[string.lower(name)]
  end
  local WALLTIME = 'allowedjobduration'
  local function is_walltime(name)
    return #name == #WALLTIME and string.lower(name) == WALLTIME
  end
  local function number(x)
    if x == math.floor(x) then return string.format('%.0f', x) end
    return string.format('%g', x)
  end
  local function refuse(index, why)
    local id = string.match(KEYS[FIRST_JOB_KEY + index], 'job:([^:]*)$') or '?'
    return redis.error_reply('job ' .. id .. ': ' .. why .. '; nothing was queued')
  end
  -- The refusal of a job with `count` counted attributes and AllowedJobDuration `wall`.
  local function check(count, wall)
    if max_wall > 0 then
      local asked, source = default_wall, "the pool's DEFAULT_JOB_WALLTIME"
      local value = wall and cmsgpack.unpack(wall)
      if type(value) == 'number' and value > 0 then asked, source = value, 'AllowedJobDuration' end
      if asked > max_wall then
        return 'the job asks for ' .. number(asked) .. ' s of wall-clock time (' .. source ..
          "), more than the pool's MAX_WALLTIME = " .. number(max_wall) .. ' s'
      end
    end
    if max_attrs and count > max_attrs then
      return 'the job has ' .. count .. ' attributes, more than the pool\'s ' ..
        'SUBMIT_MAX_JOB_ATTRS = ' .. max_attrs
    end
    return nil
  end
  local index = 0
  for r = 1, #runs do
    local shared, jobs = runs[r][1], runs[r][2]
    local shared_count, shared_wall = 0, nil
    for i = 1, #shared, 2 do
      if counted(shared[i]) then shared_count = shared_count + 1 end
      if is_walltime(shared[i]) then shared_wall = shared[i + 1] end
    end
    local shared_why = check(shared_count, shared_wall)
    for j = 1, #jobs do
      local own, count, wall, differs = jobs[j], shared_count, shared_wall, false
      for i = 1, #own, 2 do
        local name = own[i]
        if not PER_JOB[name] then
          differs = true
          if counted(name) then count = count + 1 end
          if is_walltime(name) then wall = own[i + 1] end
        end
      end
      local why = shared_why
      if differs then why = check(count, wall) end
      if why then return refuse(index, why) end
      index = index + 1
    end
  end
end

if not owner then redis.call('HSET', K_CLUSTERS, cluster, nonce) end
local ckey = cluster_key(KEYS[FIRST_JOB_KEY])
local HELD, BLOCKED = cmsgpack.pack('HELD'), cmsgpack.pack('BLOCKED')
-- The state a run's fields give its jobs (packed), for the limits.
local function packed_state(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'FetchworkState' then return fields[i + 1] end
  end
  return nil
end
-- A job the pool's rules hold back: VALIDATING for the leader, or BLOCKED by the limits.
local function hold_back(key, state)
  if validate then
    set_state(key, 'VALIDATING', STATUS_IDLE)
  elseif block and state ~= HELD and state ~= BLOCKED then
    set_state(key, 'BLOCKED', STATUS_IDLE)
    setv(key, 'BlockedReason', rules[7] or 'blocked by the scheduling policy')
  end
end
local written, linked, staged = 0, 0, {}
for r = 1, #runs do
  -- One table per run: the shared fields, then each job's own in turn.
  local fields, jobs, link = runs[r][1], runs[r][2], runs[r][3]
  local state = packed_state(fields)
  -- Whether each job of the run needs its own hold_back (its cluster hash's state
  -- does not already say what the rules want).
  local each = not link
  if link then
    -- The cluster ad: written once (a batch staged again finds it).
    if redis.call('EXISTS', ckey) == 0 then
      hset_chunked(ckey, fields, 1, #fields)
      hold_back(ckey, state)
    else
      -- The submission's first batch decided for the cluster hash: a later batch
      -- keeps its jobs waiting as the rules then said, or holds them back itself.
      local now = getv(ckey, 'FetchworkState')
      if now == 'VALIDATING' then
        validate, block = true, false
      elseif now == 'BLOCKED' and state ~= BLOCKED and not validate then
        block = true
      end
      each = not ((validate and now == 'VALIDATING') or (not validate and block and now ~= 'IDLE'))
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
    end
    if each and (validate or block) then hold_back(key, state) end
    if validate and #digests >= 32 * (written + 1) then
      staged[#staged + 1] = string.match(key, '%.([^.:]*)$')
      staged[#staged + 1] = string.sub(digests, 32 * written + 1, 32 * written + 32)
    end
    written = written + 1
  end
end
if #staged > 0 then hset_chunked(K_STAGED, staged, 1, #staged) end
if linked > 0 then
  redis.call('HSET', ckey, CLUSTER_PROCS,
             (tonumber(redis.call('HGET', ckey, CLUSTER_PROCS)) or 0) + linked)
end
local mode = validate and 'validating' or (block and 'blocked' or '')
if queue then
  return {written, mode, queue_batch(K_SETTINGS, queue, mode, cmsgpack.unpack(ARGV[8]))}
end
return {written, mode}
