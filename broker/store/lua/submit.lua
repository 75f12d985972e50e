-- submit.lua: (new) -> IDLE | HELD | VALIDATING | BLOCKED for a batch of staged
-- jobs (stage.lua wrote their hashes, FetchworkState and JobStatus included), as
-- queueing.lua's queue_batch says.
-- KEYS: the pool keys of lib.lua (touches queue, idle, validating, events and
--   the autocluster index only); KEYS[FIRST_JOB_KEY] the pool's settings hash
--   (store/poolrules.py).
-- ARGV[1] now ms or '', ARGV[2] events cap (the pool's published
--   events_maxlen, when there is one, takes its place),
-- ARGV[3] the batch: one msgpack array of queue_batch's `batch`,
-- ARGV[4] the batch's mode as stage.lua answered it (queue_batch's `mode`),
-- ARGV[5] msgpack array of queue_batch's `reps`.
-- Returns the number of jobs queued.
return queue_batch(KEYS[FIRST_JOB_KEY], cmsgpack.unpack(ARGV[3]), ARGV[4],
                   cmsgpack.unpack(ARGV[5]))
