-- qedit.lua: the user's edit of one job attribute (condor_qedit): every
-- unfinished job among the ids stores the new value; no state changes. A job
-- in the idle set takes its new place there: a new JobPrio moves it to the
-- same position within its new priority group, and an attribute a match reads
-- of it takes it out of its autocluster (a group of its own, '', as
-- acindex.lua's ac_watch does): its representative no longer stands for it.
-- A job given a PeriodicHold, PeriodicRelease or PeriodicRemove joins the
-- periodic index, so the leader's periodic pass looks at it from now on.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the jobs' hashes, in ARGV order;
-- then the pool's settings hash (store/poolrules.py); last, the periodic index
-- (zset, score = the job's submission sequence).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] the attribute's name,
-- ARGV[4] its msgpack value, ARGV[5] the new priority group (-JobPrio, clamped)
-- when the attribute is JobPrio, else '', ARGV[6] '1' when the attribute is one
-- a match reads of every job (autoclusters.SIGNIFICANT_ATTRS), else '',
-- ARGV[7] '1' when the attribute is a periodic policy expression, else '',
-- ARGV[8..] job ids.
-- Which attributes a user may edit is decided before (store/editable.py). A new
-- AllowedJobDuration meets the pool's published MAX_WALLTIME as a submission
-- does (stage.lua): above it, or with no rules published yet, the edit is
-- refused before any write, naming the rule.
-- A VALIDATING job is not edited: its submission filters judge it as submitted.
-- Emits one 'edit' event per job, with the attribute's name.
-- Returns the ids edited (finished, validating or missing jobs are skipped).
local done = {}
local NAME_ARG, VALUE_ARG = 3, 4  -- the pair store_attrs stores
local group, significant, periodic = tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7] == '1'
local K_PERIODIC, K_SETTINGS = KEYS[#KEYS], KEYS[#KEYS - 1]
if string.lower(ARGV[3]) == 'allowedjobduration' then
  local rules = redis.call('HMGET', K_SETTINGS, 'version', 'max_walltime_s', 'default_walltime_s')
  if not rules[1] then
    return redis.error_reply("the pool's broker service has not published the pool's rules "
      .. 'yet, so a new AllowedJobDuration cannot be checked against its MAX_WALLTIME')
  end
  local cap, value = tonumber(rules[2]) or 0, cmsgpack.unpack(ARGV[4])
  local asked = tonumber(rules[3]) or 0
  if type(value) == 'number' and value > 0 then asked = value end
  local function number(x)
    if x == math.floor(x) then return string.format('%.0f', x) end
    return string.format('%g', x)
  end
  if cap > 0 and asked > cap then
    return redis.error_reply('AllowedJobDuration ' .. number(asked) .. " s is more than the " ..
      "pool's MAX_WALLTIME = " .. number(cap) .. ' s; no job was edited')
  end
end
for i = 8, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 8], ARGV[i]
  local state = getv(key, 'FetchworkState')
  if state and state ~= 'COMPLETED' and state ~= 'REMOVED' and state ~= 'FAILED'
      and state ~= 'VALIDATING' then
    local was_idle = idle_remove(key, id)
    store_attrs(key, NAME_ARG, VALUE_ARG)
    if significant then setv(key, AUTOCLUSTER_ATTR, '') end
    local order = tonumber(getv(key, 'FetchworkOrder'))
    if group and order then
      order = order + (group - group_of(order)) * PRIO_SCALE
      setv(key, 'FetchworkOrder', order)
    end
    if was_idle and order then idle_add(key, id, order) end
    local seq = periodic and redis.call('ZSCORE', K_QUEUE, id)
    if seq then redis.call('ZADD', K_PERIODIC, seq, id) end
    event('edit', id, state, getv(key, 'JobStatus'), 'attr', ARGV[3])
    done[#done + 1] = id
  end
end
return done
