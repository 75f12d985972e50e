"""The claim: which idle job a slot gets, decided and taken in one atomic step.

A slot's fetch hook asks the claimer for a job. The claimer walks the idle
jobs of the autoclusters that match the slot (`index`), in priority order,
checks each candidate against what the leader left for claims (the
activation view in `activation`, the backfill reservation in `backfill`, the
waiting slots of `sorting`), and takes the first one with claim.lua, which
succeeds only while the job is still idle. The claimer's first step, the
quiet claim, is the common case: a pool with nothing to hold jobs back
claims in one Lua call (claim_quiet.lua).
"""
