-- transfer_detach.lua: `n` jobs no longer need input manifest `id` (a submission
-- that failed after its inputs were attached); at no reference the manifest and
-- the chunks only it held are freed. A job leaving the queue drops its input's
-- reference in the same step that moves it (jobstates.lua's to_history). Gets
-- transferrefs.lua in front (its key layout is described there).
-- KEYS[1] xfer:refs
-- ARGV[1] the manifest id   ARGV[2] n
-- Returns the references left (0: freed, or not held).
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - #'xfer:refs')
return xfer_release(prefix, ARGV[1], tonumber(ARGV[2]))
