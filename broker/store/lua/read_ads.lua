-- read_ads.lua: read several job ads in one reply (a read, not a
-- transition; it runs with jobad.lua and packads.lua, without lib.lua: each ad
-- is the job's hash over its cluster's, ad_flat).
-- KEYS[1..n] job hashes. ARGV[1] (may be absent) 'split': each job's own hash
-- and each cluster hash once, not the jobs' whole ads (packads.lua split_ads;
-- store/batchads.py puts them together).
-- Returns one msgpack array holding, per key in order, a msgpack map of the
-- ad's fields (empty for a missing job). The stored values are msgpack
-- already, so the reply is put together by concatenation (names get a str
-- header) and the client decodes all of it in one call, in C.
-- With 'split', the array holds per key its hash's fields, bookkeeping ones
-- ('#...', as bin) included, then per cluster hash the jobs link to (in the
-- order of their first job) its fields likewise: n + clusters maps.
if ARGV[1] == 'split' then return split_ads(KEYS) end
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
