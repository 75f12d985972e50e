-- transfer_event.lua: a file transfer step of a job, on the pool's event stream
-- (the user log writes HTCondor's event 040 from it). Not a state change: the
-- job's hash is not touched.
-- KEYS[1] events stream
-- ARGV[1] the stream's approximate cap (XADD MAXLEN ~)
-- ARGV[2] the job id
-- ARGV[3] the step: input_queued, input_started, input_finished, output_queued,
--         output_started or output_finished
-- ARGV[4..] more field, value pairs (host, bytes, seconds, success)
-- Returns the entry's id.
local fields = {'type', 'transfer', 'job', ARGV[2], 'kind', ARGV[3]}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
