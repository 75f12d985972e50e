-- claim_quiet.lua: the one-call claim of the common case (broker/claim/claimer.py,
-- the quiet step): IDLE -> RUNNING for the head of the best placed autocluster
-- that matches the slot, with no job read by the caller first. Runs with
-- claims.lua (the checks it shares with claim.lua) and reservation.lua.
-- KEYS: the pool keys of lib.lua; KEYS[FIRST_JOB_KEY] the PS ledger (see
--   claim.lua); KEYS[FIRST_JOB_KEY + 1] the pool's backfill key (string: the
--   leader's reservation, backfill/plan.py to_record).
-- ARGV[1] now ms or '', ARGV[2] events cap, ARGV[3] claim token, ARGV[4] slot
-- name (RemoteHost), ARGV[5] default lease seconds, ARGV[6] the job hash key
-- prefix (a job's hash is the prefix and its id), ARGV[7] the autoclusters
-- whose representative matches the slot for all their jobs, ARGV[8] those
-- that cannot match, ARGV[9] those whose jobs must be judged one by one
-- (each a space-separated list of ids).
-- It walks ac:groups best first and claims the head of the first matching
-- autocluster, as claim.lua would (the same checks; a start as claim.lua's).
-- Returns {'job', cmsgpack {job id, its ad flat}}, 'none' when no
-- autocluster with idle jobs matches, {'groups', ids...} (ac:groups from the
-- first one the caller has not judged on) when it must judge more, or 'slow'
-- when the full claim must decide: activation configured, a slot reservation,
-- a block, an index that does not cover the idle set, a head after the job of
-- a backfill reservation, an unreadable reservation, a job to judge alone, or
-- a head the checks hold back. The backfill reservation holds back no job at
-- or before its job in the idle order (claim/backfill.py), and nothing once it
-- lapsed (reservation.lua).
local token, slot, lease_s, job_prefix = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local K_LEDGER, K_BACKFILL = KEYS[FIRST_JOB_KEY], KEYS[FIRST_JOB_KEY + 1]
local view = claim_view(slot)

local function id_set(text)
  local set = {}
  for gid in string.gmatch(text, '%S+') do set[gid] = true end
  return set
end

if activation_configured(view) or view.reserved or #view.blocks > 0
    or redis.call('ZCARD', K_IDLE) ~= redis.call('ZCARD', K_AC_MEMBERS) then
  return 'slow'
end
local reservation = reservation_in_force(redis.call('GET', K_BACKFILL), K_IDLE)
if reservation == false then return 'slow' end
local bound = reservation and reservation['order'] or math.huge
local matching, refusing, judged = id_set(ARGV[7]), id_set(ARGV[8]), id_set(ARGV[9])
local first, page = 0, 64
while true do
  local gids = redis.call('ZRANGE', K_AC_GROUPS, first, first + page - 1)
  if #gids == 0 then return 'none' end
  for i, gid in ipairs(gids) do
    if matching[gid] then
      local head = redis.call('ZRANGEBYLEX', K_AC_MEMBERS, '[' .. gid .. '|', '(' .. gid .. '}',
                              'LIMIT', '0', '1')[1]
      local id = head and string.match(head, '^[^|]*|[^|]*|(.*)$')
      if not id then return 'slow' end
      local key = job_prefix .. id
      local order = redis.call('ZSCORE', K_IDLE, id)
      if order and tonumber(order) <= bound and allowed(view, key, id, tonumber(order))
          and not needs_activation(view, key)
          and policy_allows(K_LEDGER, key, id) then
        return {'job', start_claim(key, id, token, slot, lease_s)}
      end
      return 'slow'
    elseif judged[gid] or gid == '' then
      return 'slow'
    elseif not refusing[gid] then
      local unknown = {'groups'}
      for rest = i, #gids do unknown[#unknown + 1] = gids[rest] end
      return unknown
    end
  end
  first = first + page
end
