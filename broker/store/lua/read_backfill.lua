-- read_backfill.lua: the full claim's read of the leader's backfill
-- reservation (broker/claim/activation.py first_read), judged as the quiet
-- claim judges it (reservation.lua reservation_in_force): a reservation
-- whose job is no longer idle holds nothing back, so it is not returned.
-- Reads only; it runs with reservation.lua, without lib.lua.
-- KEYS[1] the idle set (zset), KEYS[2] the pool's backfill key (string: the
--   leader's msgpack record, backfill/plan.py to_record). No ARGV.
-- Returns the backfill key's value (unreadable ones too: the caller's
-- decoder decides those), or nil when there is no reservation or it lapsed.
local raw = redis.call('GET', KEYS[2])
if reservation_in_force(raw, KEYS[1]) == nil then return nil end
return raw
