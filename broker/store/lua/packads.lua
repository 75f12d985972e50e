-- packads.lua: job ads as one msgpack reply, put together from the stored values
-- (msgpack already) by concatenation, so the client decodes all of it in one call,
-- in C. store/scripts.py puts this text in front of the scripts that return ads
-- (read_ads.lua, read_waiting.lua), after jobad.lua.
--
-- split_ads(keys): for the job hashes `keys`, one msgpack array holding, per key in
-- order, a map of its hash's fields (empty for a missing job; bookkeeping ones,
-- '#...', as bin), then per cluster hash the jobs link to (in the order of their
-- first job) its fields likewise: #keys + clusters maps. store/batchads.py puts
-- each job's ad together from them: a batch of one cluster's jobs costs the
-- server one read of each hash and no concatenation of the cluster's fields per job.
local function header(n, fix, fix_limit, code16, code32)
  if n < fix_limit then return string.char(fix + n) end
  if n < 65536 then return string.char(code16, math.floor(n / 256), n % 256) end
  return string.char(code32) .. struct.pack('>I4', n)
end
local function name_header(len)
  if len < 32 then return string.char(0xa0 + len) end
  if len < 256 then return string.char(0xd9, len) end
  return header(len, 0xa0, 32, 0xda, 0xdb)
end
-- A msgpack bin header (bookkeeping values are raw bytes, not msgpack).
local function bin_header(len)
  if len < 256 then return string.char(0xc4, len) end
  if len < 65536 then return string.char(0xc5, math.floor(len / 256), len % 256) end
  return string.char(0xc6) .. struct.pack('>I4', len)
end
local function split_ads(keys)
  local maps, named, order = {}, {}, {}
  local function add(flat)
    maps[#maps + 1] = header(#flat / 2, 0x80, 16, 0xde, 0xdf)
    for j = 1, #flat, 2 do
      maps[#maps + 1] = name_header(#flat[j])
      maps[#maps + 1] = flat[j]
      if is_attr(flat[j]) then
        maps[#maps + 1] = flat[j + 1]
      else
        maps[#maps + 1] = bin_header(#flat[j + 1])
        maps[#maps + 1] = flat[j + 1]
      end
    end
  end
  for i = 1, #keys do
    local own = redis.call('HGETALL', keys[i])
    for j = 1, #own, 2 do
      if own[j] == JOB_LINK then
        local ckey = cluster_key(keys[i])
        if ckey and not named[ckey] then
          named[ckey] = true
          order[#order + 1] = ckey
        end
      end
    end
    add(own)
  end
  for _, ckey in ipairs(order) do add(redis.call('HGETALL', ckey)) end
  return header(#keys + #order, 0x90, 16, 0xdc, 0xdd) .. table.concat(maps)
end
