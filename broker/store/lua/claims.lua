-- claims.lua: what both claim scripts (claim.lua, the claim of given
-- candidates, and claim_quiet.lua, the one-call claim) check of a job before
-- they take it; store/scripts.py puts this text after the LIBRARY parts in
-- front of theirs. It reads what the leader left for claims on the slot
-- (filters/gate.py ClaimView) once per call, in `claim_view`.

-- What the leader left for claims on slot `slot`: the job an activation
-- answer 2 reserved it for (false: none), the lowest blocks (job, priority
-- group, ...) and the filters summary {activate, templates, wait_ms}.
local function claim_view(slot)
  return {slot = slot,
          reserved = redis.call('HGET', K_RESERVATIONS, slot),
          blocks = redis.call('ZRANGE', K_BLOCKS, 0, 15, 'WITHSCORES'),
          summary = redis.call('HMGET', K_FILTERS, 'activate', 'templates', 'wait_ms')}
end

-- Whether some job may need activation (a cluster-wide chain or a template's).
local function activation_configured(view)
  local summary = view.summary
  return summary[1] == '1' or (summary[2] and summary[2] ~= '') or false
end

-- Blocks, reservations and re-evaluation times (filters/gate.py may_offer).
local function allowed(view, key, id, order)
  if view.reserved and view.reserved ~= id then return false end
  local mine = getv(key, 'FetchworkReservedSlot')
  if mine and mine ~= view.slot then return false end
  local after = getv(key, 'FetchworkActivateAfter')
  if type(after) == 'number' and after > NOW then return false end
  local group = group_of(order)
  local blocks = view.blocks
  for b = 1, #blocks, 2 do
    if blocks[b] ~= id and tonumber(blocks[b + 1]) <= group then return false end
  end
  return true
end

-- The cluster-wide chain, or the chain of the job's template (filters/gate.py).
local function needs_activation(view, key)
  local summary = view.summary
  if summary[1] == '1' then return true end
  if not summary[2] or summary[2] == '' then return false end
  local template = getv(key, 'JobTemplate')
  if type(template) ~= 'string' then return false end
  template = string.lower(template)
  for name in string.gmatch(summary[2], '%S+') do
    if name == template then return true end
  end
  return false
end

-- The policy's PS re-check (broker/scheduling/limits.py start_refusal) against
-- the PS ledger `ledger_key` (hash: scheduling policy budget -> msgpack array
-- of {job id, walltime end in s, CPUs} of its running jobs); records the job
-- in its budget's ledger when it may start. Jobs no longer claimed drop out.
local function policy_allows(ledger_key, key, id)
  local budget = getv(key, 'FetchworkBudget')
  if not budget or not ledger_key then return true end
  local raw = redis.call('HGET', ledger_key, budget)
  local live, used, now_s = {}, 0, NOW / 1000
  for _, entry in ipairs(raw and cmsgpack.unpack(raw) or {}) do
    if redis.call('ZSCORE', K_RUNNING, entry[1]) then
      live[#live + 1] = entry
      used = used + math.max(0, entry[2] - now_s) * entry[3]
    end
  end
  local cpus = tonumber(getv(key, 'FetchworkCpus')) or 1
  local walltime = tonumber(getv(key, 'FetchworkWalltime')) or 0
  local limit = tonumber(getv(key, 'FetchworkPsLimit')) or 0
  local fits = limit <= 0 or used + cpus * walltime <= limit
  if fits then live[#live + 1] = {id, now_s + walltime, cpus} end
  redis.call('HSET', ledger_key, budget, cmsgpack.pack(live))
  return fits
end
