-- reservation_expire.lua: a slot reserved by an activation answer 2 that has
-- not come back for its job lapses (its startd is gone, a glide-in ended):
-- the job may then go to any slot.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY..] the reserved jobs'
--   hashes, in ARGV order.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] how long (ms) past its
--   re-evaluation time a reserved IDLE job waits for its slot, ARGV[4..] job ids.
-- A reservation whose job is no longer IDLE and reserved is only dropped.
-- Returns the ids whose reservation lapsed.
local done = {}
local grace = tonumber(ARGV[3])
for i = 4, #ARGV do
  local key, id = KEYS[FIRST_JOB_KEY + i - 4], ARGV[i]
  local slot = getv(key, 'FetchworkReservedSlot')
  local after = getv(key, 'FetchworkActivateAfter')
  local state = getv(key, 'FetchworkState')
  if not slot or (state ~= 'IDLE' and state ~= 'ACTIVATING') then
    for _, reserved in ipairs(redis.call('HKEYS', K_RESERVATIONS)) do
      if redis.call('HGET', K_RESERVATIONS, reserved) == id then
        redis.call('HDEL', K_RESERVATIONS, reserved)
      end
    end
  elseif state == 'IDLE' and type(after) == 'number' and after + grace <= NOW then
    redis.call('HDEL', K_RESERVATIONS, slot)
    hdel(key, 'FetchworkReservedSlot')
    done[#done + 1] = id
  end
end
return done
