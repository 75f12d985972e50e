-- edit.lua: change attributes of a HELD job (a person's edit request, carried out by
-- the leader: broker/trust/desk.py); the job stays HELD.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the job's hash.
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] job id, ARGV[4] the
--   FetchworkSignature the leader made over the job as edited ('' for none),
--   ARGV[5..] (name, packed value) pairs to store.
-- An attribute a match reads clears the job's autocluster (acindex.lua), so its
-- release files it afresh. One 'edit' event.
-- Returns 1, or 0 when the job is not HELD (nothing is changed).
local key, id = KEYS[FIRST_JOB_KEY], ARGV[3]
if getv(key, 'FetchworkState') ~= 'HELD' then return 0 end
store_attrs(key, 5, #ARGV)
if ARGV[4] ~= '' then setv(key, 'FetchworkSignature', ARGV[4]) end
event('edit', id, 'HELD', STATUS_HELD)
return 1
