"""Backfill in a pull model: reservations for the head of the queue, and which lower
jobs a slot may take without delaying them (scheduler.txt, Maui's backfill).

`plan` holds the pure arithmetic (reservation, window, the per-candidate
decision); `pool` reads machines, running and waiting jobs out of ads;
`leader` computes and stores the reservation in the leader's pass and counts
bypasses. The check a claim applies per candidate is broker/claim/backfill.py,
and the resource sorting of waiting slots (MATCH_SORT_WINDOW) is
broker/claim/sorting.py.
"""
