-- reservation.lua: the leader's backfill reservation as a claim sees it,
-- shared by the quiet claim (claim_quiet.lua) and the full claim's first read
-- (read_backfill.lua); store/scripts.py puts this text in front of theirs.
-- It needs no other part: the caller names the idle set.
--
-- A lapsed reservation holds nothing back: once the reserved job is no longer
-- idle (it started, or was removed or held, since the leader's pass), no job
-- waits for it (the leader's next pass, due at once on that job's event,
-- stores the next reservation).

-- The reservation in the backfill key's value `raw` (the leader's msgpack
-- record, backfill/plan.py to_record) as it holds jobs back now: nil when
-- there is none or it lapsed (its job is not in the idle set `idle_key`),
-- false when the record cannot be read here, else the record (its `job`
-- and its `order`, the job's idle score, among the fields).
local function reservation_in_force(raw, idle_key)
  if not raw then return nil end
  local ok, record = pcall(cmsgpack.unpack, raw)
  if not ok or type(record) ~= 'table' or type(record['job']) ~= 'string'
      or type(record['order']) ~= 'number' then
    return false
  end
  if not redis.call('ZSCORE', idle_key, record['job']) then return nil end
  return record
end
