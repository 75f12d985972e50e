-- acindex.lua: the autocluster index of the idle set, for the job transition
-- scripts; store/scripts.py puts it after lib.lua (whose keys and helpers it uses).
--
-- The autocluster index of the idle set (broker/claim/index.py): every change
-- of the idle set goes through idle_add and idle_remove, in the same script.
-- A member spells the score + AC_ORDER_OFFSET in AC_ORDER_WIDTH digits of base
-- AC_ORDER_BASE from the character AC_ORDER_ZERO on, or, for an autocluster id
-- of an older broker (AC_LEGACY_GID_LENGTH long), in AC_LEGACY_ORDER_WIDTH
-- decimal digits (autoclusters.py order_text).
local AC_LEGACY_FORMAT = '%0' .. AC_LEGACY_ORDER_WIDTH .. '.0f'
local function order_text(gid, order)
  local shifted = order + AC_ORDER_OFFSET
  if #gid == AC_LEGACY_GID_LENGTH then return string.format(AC_LEGACY_FORMAT, shifted) end
  local digits = {}
  for i = AC_ORDER_WIDTH, 1, -1 do
    local digit = shifted % AC_ORDER_BASE
    digits[i] = string.char(AC_ORDER_ZERO + digit)
    shifted = (shifted - digit) / AC_ORDER_BASE
  end
  return table.concat(digits)
end

local function order_value(text)
  if #text == AC_LEGACY_ORDER_WIDTH then return tonumber(text) - AC_ORDER_OFFSET end
  local shifted = 0
  for i = 1, #text do shifted = shifted * AC_ORDER_BASE + string.byte(text, i) - AC_ORDER_ZERO end
  return shifted - AC_ORDER_OFFSET
end

local function ac_member(gid, order, id)
  return gid .. '|' .. order_text(gid, order) .. '|' .. id
end

local function ac_gid(key)
  local raw = hget_raw(key, AUTOCLUSTER_ATTR)
  local gid = raw and cmsgpack.unpack(raw)
  return type(gid) == 'string' and gid or ''
end

local function ac_remove(gid, id, order)
  if redis.call('ZREM', K_AC_MEMBERS, ac_member(gid, order, id)) == 0 then return end
  local best = tonumber(redis.call('ZSCORE', K_AC_GROUPS, gid))
  if best and best < order then return end
  local head = redis.call('ZRANGEBYLEX', K_AC_MEMBERS, '[' .. gid .. '|', '(' .. gid .. '}',
                          'LIMIT', '0', '1')
  if #head == 0 then
    redis.call('ZREM', K_AC_GROUPS, gid)
  else
    local digits = string.match(head[1], '^[^|]*|([^|]*)|')
    redis.call('ZADD', K_AC_GROUPS, score(order_value(digits)), gid)
  end
end

-- (anything) -> in the idle set at `order`, in its autocluster.
local function idle_add(key, id, order)
  local gid = ac_gid(key)
  local old = redis.call('ZSCORE', K_IDLE, id)
  if old then ac_remove(gid, id, tonumber(old)) end
  redis.call('ZADD', K_IDLE, score(order), id)
  redis.call('ZADD', K_AC_MEMBERS, 0, ac_member(gid, order, id))
  redis.call('ZADD', K_AC_GROUPS, 'LT', score(order), gid)
end

-- Out of the idle set and its autocluster; false when it was not idle.
local function idle_remove(key, id)
  local old = redis.call('ZSCORE', K_IDLE, id)
  if not old then return false end
  redis.call('ZREM', K_IDLE, id)
  ac_remove(ac_gid(key), id, tonumber(old))
  return true
end

-- A job whose stored attributes change what a match reads of it leaves its
-- autocluster: it becomes a group of its own ('' = each job evaluated).
local function ac_watch(key, first, last)
  local gid = ac_gid(key)
  if gid == '' then return end
  local rep = redis.call('HGET', K_AC_REPS, gid)
  local watched = ' ' .. (rep and string.match(rep, '^[^\n]*') or '') .. ' '
  for i = first, last, 2 do
    local name = string.lower(ARGV[i])
    if name == string.lower(AUTOCLUSTER_ATTR) then return end
    if string.find(watched, ' ' .. name .. ' ', 1, true) then
      setv(key, AUTOCLUSTER_ATTR, '')
      return
    end
  end
end
