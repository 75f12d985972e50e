-- activate_defer.lua: ACTIVATING -> IDLE when the activation chain answered 1
-- (block the queue: no job of equal or lower JobPrio is handed out while the
-- block stands) or 2, another code, a timeout or a missing program (reserve
-- the slot that asked: it is handed no other job), or a backfill start
-- answered other than 0, 3 or 4 ('retry': neither). Either way the job is not
-- evaluated again before now + the interval, and a slot the job already holds
-- (a former answer 2) stays its own.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash,
--   KEYS[FIRST_JOB_KEY + 1] the claim's reply list, KEYS[FIRST_JOB_KEY + 2]
--   its activation request hash (deleted).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] claim
--   token, ARGV[5] 'block', 'reserve' or 'retry', ARGV[6] the reason in words,
--   ARGV[7] re-evaluation interval ms, ARGV[8] reply lifetime ms.
-- The reply is 'no'. Returns 1, or 0 when the claim is gone.
local key, id, token = KEYS[FIRST_JOB_KEY], ARGV[3], ARGV[4]
local reply, request = KEYS[FIRST_JOB_KEY + 1], KEYS[FIRST_JOB_KEY + 2]
redis.call('DEL', request)
answer(reply, 'no', ARGV[8])
if not own_activation(key, token) then return 0 end
local slot = getv(key, 'FetchworkActivationSlot')
local kept = getv(key, 'FetchworkReservedSlot')
if kept and redis.call('HGET', K_RESERVATIONS, kept) ~= id then kept = nil end
leave_activation(key, id)
forget_activation(key, id)
if ARGV[5] == 'block' then
  redis.call('ZADD', K_BLOCKS, group_of(getv(key, 'FetchworkOrder') or 0), id)
end
-- A reservation stays on the slot it was first made for until the job starts,
-- fails, is held or the reservation lapses (reservation_expire.lua): a later
-- answer, whichever, neither moves it nor gives it up.
local reserved = kept or (ARGV[5] == 'reserve' and slot)
if reserved then
  redis.call('HSET', K_RESERVATIONS, reserved, id)
  setv(key, 'FetchworkReservedSlot', reserved)
end
setv(key, 'FetchworkActivateAfter', NOW + tonumber(ARGV[7]))
setv(key, 'FetchworkActivationReason', ARGV[6])
to_idle(key, id, 'activation', 'verdict', ARGV[5])
return 1
