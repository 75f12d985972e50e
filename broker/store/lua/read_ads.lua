-- read_ads.lua: read several job ads in one reply (a read, not a
-- transition; it runs with jobad.lua, without lib.lua: each ad is the job's
-- hash over its cluster's, ad_flat).
-- KEYS[1..n] job hashes. No ARGV.
-- Returns one msgpack array holding, per key in order, a msgpack map of the
-- ad's fields (empty for a missing job). The stored values are msgpack
-- already, so the reply is put together by concatenation (names get a str
-- header) and the client decodes all of it in one call, in C.
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
