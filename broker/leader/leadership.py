"""How soon a standby broker replica looks at the leader lease again.

A leader that dies (SIGKILL, a lost machine) stops renewing its lease; its
key expires after at most BROKER_LEADER_LEASE seconds (a few: the leader
renews three times per lease). A standby does not wait a whole tick past
that moment: it reads the key's remaining time and wakes just after it ends,
so the pool is without a reaper for no longer than the lease.
"""

from __future__ import annotations

import redis

from fetchwork.broker.store import Store
from fetchwork.errors import FetchworkError

# Woken this long after the lease's end, so the key is surely gone.
AFTER_EXPIRY_S = 0.02


def standby_wait_s(tick_s: float, leader_ttl_ms: int | None) -> float:
    """A standby's wait before its next try: its tick, or less when the leader's lease
    ends sooner (`leader_ttl_ms` None or negative: no lease to wait for)."""
    if leader_ttl_ms is None or leader_ttl_ms < 0:
        return tick_s
    return max(0.0, min(tick_s, leader_ttl_ms / 1000.0 + AFTER_EXPIRY_S))


def leader_ttl_ms(store: Store) -> int | None:
    """Milliseconds left of the current leader's lease; None when unknown."""
    try:
        return int(store.client.pttl(store.keys.leader))
    except (redis.RedisError, FetchworkError, TypeError, ValueError):
        return None
