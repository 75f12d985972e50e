-- read_ads.lua: read several job ads in one reply (a read, not a
-- transition; it runs with jobad.lua, without lib.lua: each ad is the job's
-- hash over its cluster's, ad_flat).
-- KEYS[1..n] job hashes. ARGV[1] (may be absent) 'split': each job's own hash
-- and each cluster hash once, not the jobs' whole ads (store/batchads.py puts
-- them together: a batch of one cluster's jobs then costs the server one read
-- of each hash and no concatenation of the cluster's fields per job).
-- Returns one msgpack array holding, per key in order, a msgpack map of the
-- ad's fields (empty for a missing job). The stored values are msgpack
-- already, so the reply is put together by concatenation (names get a str
-- header) and the client decodes all of it in one call, in C.
-- With 'split', the array holds per key its hash's fields, bookkeeping ones
-- ('#...', as bin) included, then per cluster hash the jobs link to (in the
-- order of their first job) its fields likewise: n + clusters maps.
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
if ARGV[1] == 'split' then
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
  for i = 1, #KEYS do
    local own = redis.call('HGETALL', KEYS[i])
    for j = 1, #own, 2 do
      if own[j] == JOB_LINK then
        local ckey = cluster_key(KEYS[i])
        if ckey and not named[ckey] then
          named[ckey] = true
          order[#order + 1] = ckey
        end
      end
    end
    add(own)
  end
  for _, ckey in ipairs(order) do add(redis.call('HGETALL', ckey)) end
  return header(#KEYS + #order, 0x90, 16, 0xdc, 0xdd) .. table.concat(maps)
end
local out = {header(#KEYS, 0x90, 16, 0xdc, 0xdd)}
local clusters = {}  -- each cluster hash read once for all its jobs here
for i = 1, #KEYS do
  local flat = ad_flat(KEYS[i], clusters)
  out[#out + 1] = header(#flat / 2, 0x80, 16, 0xde, 0xdf)
  for j = 1, #flat, 2 do
    out[#out + 1] = name_header(#flat[j])
    out[#out + 1] = flat[j]
    out[#out + 1] = flat[j + 1]
  end
end
return table.concat(out)
