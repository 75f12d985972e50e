-- transfer_settle.lua: a job's returned outputs are settled: delivered (written
-- into its Iwd, or fetched by transfer-data) or expired. They leave the outputs
-- waiting, the job's hash says which, and their manifest loses the job's
-- reference (freed at none). Gets transferrefs.lua in front (its key layout is
-- described there).
-- KEYS[1] xfer:refs   KEYS[2] xfer:outputs   KEYS[3] the job's hash
-- ARGV[1] the output manifest id   ARGV[2] the job id
-- ARGV[3] 'delivered' or 'expired' (stored as the job's FetchworkOutputs)
-- Returns 1 when settled here, 0 when they were not waiting (settled meanwhile:
-- nothing changed).
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - #'xfer:refs')
if redis.call('ZREM', KEYS[2], ARGV[2] .. '|' .. ARGV[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'FetchworkOutputs', cmsgpack.pack(ARGV[3]))
end
xfer_release(prefix, ARGV[1], 1)
return 1
