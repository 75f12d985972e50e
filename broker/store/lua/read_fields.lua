-- read_fields.lua: a few attributes of many jobs in one reply, for big tables
-- (a read, not a transition; it runs with jobad.lua, without lib.lua).
-- KEYS[1..n] job hashes.
-- ARGV[1..m] attribute (field) names.
-- Returns one msgpack array holding, per key in order, the array of the m
-- stored values (nil for a missing field or job). The stored values are
-- msgpack already, so the reply is put together by concatenation and the
-- client decodes all of it in one call.
local function array_header(n)
  if n < 16 then return string.char(0x90 + n) end
  if n < 65536 then return string.char(0xdc, math.floor(n / 256), n % 256) end
  return string.char(0xdd) .. struct.pack('>I4', n)
end
local out = {array_header(#KEYS)}
local fields = #ARGV
local names = {unpack(ARGV)}
local row = array_header(fields)
for i = 1, #KEYS do
  local values = hmget_raw(KEYS[i], names)
  out[#out + 1] = row
  for j = 1, fields do
    local value = values[j]
    if value then out[#out + 1] = value else out[#out + 1] = '\192' end
  end
end
return table.concat(out)
