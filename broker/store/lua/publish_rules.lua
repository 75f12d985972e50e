-- publish_rules.lua: the leader publishes the pool's rules (store/poolrules.py)
-- and the filter summary claims read (filters/gate.py), in one step. Stands
-- alone (no lib.lua).
-- KEYS[1] the pool's settings hash, KEYS[2] the pool's filters hash.
-- ARGV[1] digest of the rules, ARGV[2] the publishing replica, ARGV[3] now (s),
-- ARGV[4] n = number of rule fields, ARGV[5..4+2n] (field, value) pairs of the
--   rules, then (field, value) pairs of the filter summary.
-- The settings hash is rewritten whole, with version + 1, only when the digest
-- differs from the one stored (or nothing is stored); the summary is written
-- every time (the claims' pass counter in the filters hash is left alone).
-- Returns {version in force, 1 when this call published a new version else 0}.
local digest, replica, now_s = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local summary = {}
for i = 5 + 2 * n, #ARGV do summary[#summary + 1] = ARGV[i] end
if #summary > 0 then redis.call('HSET', KEYS[2], unpack(summary)) end
local stored = redis.call('HMGET', KEYS[1], 'digest', 'version')
local version = tonumber(stored[2]) or 0
if stored[1] == digest and version > 0 then return {version, 0} end
version = version + 1
local rules = {}
for i = 5, 4 + 2 * n do rules[#rules + 1] = ARGV[i] end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'version', version, 'digest', digest, 'published_by', replica,
           'published_at', now_s, unpack(rules))
return {version, 1}
