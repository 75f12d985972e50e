-- sig_sweep.lua: free the stored signed batches none of whose jobs is queued any
-- more (the leader's, on each of its filter passes: broker/filters/leader.py).
-- KEYS[1] the queue (zset of unfinished jobs), KEYS[2] the live batches (set,
--   sigbatch.lua describes the batch keys, made here from its prefix).
-- ARGV[1] how many batches, taken at random from the live ones, to look at.
-- A batch's jobs are looked at in order and only up to the first still queued;
-- the ones before it are dropped from the batch's runs, so each job is looked at
-- once when it has gone and a batch costs one look a pass while it lives. A batch
-- whose jobs have all gone loses its keys. Returns the number of batches freed.
local P = string.sub(KEYS[2], 1, #KEYS[2] - #'sigbatches')
local freed = 0
for _, number in ipairs(redis.call('SRANDMEMBER', KEYS[2], tonumber(ARGV[1]))) do
  local jobs_key = P .. 'sig:' .. number .. ':jobs'
  local runs = redis.call('GET', jobs_key) or ''
  local left, live = {}, false
  for cluster, first, last in string.gmatch(runs, '(%d+)%.(%d+)%-(%d+)') do
    if live then
      left[#left + 1] = cluster .. '.' .. first .. '-' .. last
    else
      local proc, stop = tonumber(first), tonumber(last)
      while proc <= stop and not redis.call('ZSCORE', KEYS[1], cluster .. '.' .. proc) do
        proc = proc + 1
      end
      if proc <= stop then
        live = true
        left[#left + 1] = cluster .. '.' .. proc .. '-' .. last
      end
    end
  end
  if live then
    local kept = table.concat(left, ' ')
    if kept ~= runs then redis.call('SET', jobs_key, kept) end
  else
    redis.call('DEL', P .. 'sig:' .. number, jobs_key)
    redis.call('SREM', KEYS[2], number)
    freed = freed + 1
  end
end
return freed
