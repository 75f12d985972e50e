"""How long a submission waits for replicas before it is acknowledged to the user.

Redis replicates asynchronously: a master that acknowledged a write and died
a moment later may not have passed it to the replica that Sentinel then
promotes. With FETCHWORK_BROKER_WAIT_REPLICAS = N > 0, a submission's last
transaction is followed by `WAIT N <FETCHWORK_BROKER_WAIT_TIMEOUT in ms>` on
the same connection, after a no-op write (`INCRBY counter:seq 0`) that gives
that connection the write offset of everything this process wrote before,
so `submit` returns only once N replicas hold the whole cluster, or the
timeout passed: then it warns with how many did. WAIT is not a
transaction: a failover inside that timeout, to a replica that had not
acknowledged, can still lose the jobs (and a replica that acknowledged may
lose them if it restarts without AOF). N = 0 (the default, right for one
plain Redis) sends no WAIT. HTCondor has no such knob: its schedd writes
its job queue log to its own disk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from fetchwork.config.loader import Config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaWait:
    """WAIT `replicas` replicas for at most `timeout_ms` after a submission (0: no WAIT)."""

    replicas: int
    timeout_ms: int

    @classmethod
    def from_config(cls, config: Config) -> ReplicaWait:
        return cls(max(0, config.get_int("FETCHWORK_BROKER_WAIT_REPLICAS")),
                   max(0, int(config.get_duration_s("FETCHWORK_BROKER_WAIT_TIMEOUT") * 1000)))

    def after(self, client: redis.Redis, counter_key: str, what: str) -> int | None:
        """WAIT after `what` was written: how many replicas acknowledged it (None: no WAIT,
        or the WAIT itself failed). Fewer than asked is logged as a warning, never raised:
        the master did acknowledge the write."""
        if self.replicas <= 0:
            return None
        try:
            pipe = client.pipeline(transaction=False)
            pipe.incrby(counter_key, 0)
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
            _same, acknowledged = pipe.execute()
        except redis.RedisError as exc:
            log.warning("%s: could not wait for %d replica(s) (%s); it may not survive a "
                        "failover of the broker's Redis", what, self.replicas, exc)
            return None
        acknowledged = int(acknowledged)
        if acknowledged < self.replicas:
            log.warning("%s: only %d of %d replica(s) acknowledged it within %d ms "
                        "(FETCHWORK_BROKER_WAIT_REPLICAS); a failover now could lose it",
                        what, acknowledged, self.replicas, self.timeout_ms)
        return acknowledged
