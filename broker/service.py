"""The broker service: leadership through a Redis lease, and the lease reaper.

Any number of replicas may run. Each tick a replica extends the pool's
leader key when it holds it (leader_renew.lua, compare-and-extend) or takes
it when it is free (SET NX PX); only the leader reaps. The tick is
short enough to renew the leadership three times per BROKER_LEADER_LEASE,
and the reaper runs every BROKER_REAPER_INTERVAL. A leader that dies simply
stops renewing; another replica takes over when the key expires. More
periodic policy (holds expiring, dependencies) joins `run_once`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import redis

from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError

from .client import Broker

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    leader: bool
    reaped: list[str] = field(default_factory=list)
    forgotten: int = 0


def tick_interval_s(reaper_interval_s: float, leader_lease_s: float) -> float:
    """How often a replica wakes: often enough to reap on time and to renew leadership."""
    return max(0.05, min(reaper_interval_s, leader_lease_s / 3.0))


def reap_due(now_s: float, last_reap_s: float | None, reaper_interval_s: float) -> bool:
    """Whether the leader should reap now (always on its first pass)."""
    return last_reap_s is None or now_s - last_reap_s >= reaper_interval_s


def default_replica_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class BrokerService:
    """One replica of `fetchwork broker`."""

    def __init__(self, broker: Broker, reaper_interval_s: float = 5.0,
                 leader_lease_s: float = 15.0, replica: str | None = None,
                 history_max_jobs: int | None = None):
        self.broker = broker
        self.store = broker.store
        # The history keeps the newest finished jobs; None keeps them all.
        self.history_max_jobs = history_max_jobs
        self.reaper_interval_s = reaper_interval_s
        self.leader_lease_s = leader_lease_s
        self.replica = replica or default_replica_name()
        self.is_leader = False
        self._last_reap_s: float | None = None

    @classmethod
    def from_config(cls, broker: Broker, config: Config) -> BrokerService:
        return cls(broker,
                   reaper_interval_s=config.get_duration_s("BROKER_REAPER_INTERVAL"),
                   leader_lease_s=config.get_duration_s("BROKER_LEADER_LEASE"),
                   replica=(config.get("BROKER_REPLICA_NAME") or "").strip() or None,
                   history_max_jobs=config.get_int("BROKER_HISTORY_MAX_JOBS"))

    def try_lead(self) -> bool:
        """Take or extend leadership; True while this replica leads."""
        lease_ms = max(1, int(self.leader_lease_s * 1000))
        leads = self.store.lead(self.replica, lease_ms)
        if leads != self.is_leader:
            log.info("replica %s %s leadership of pool %s", self.replica,
                     "took" if leads else "lost", self.broker.pool)
            self._last_reap_s = None
        self.is_leader = leads
        return leads

    def resign(self) -> None:
        """Give leadership up (on shutdown) so another replica takes over at once."""
        if self.store.resign(self.replica):
            log.info("replica %s resigned leadership of pool %s", self.replica, self.broker.pool)
        self.is_leader = False

    def run_once(self, now_s: float | None = None) -> PassResult:
        """One pass: renew leadership, and reap when leading and due."""
        now_s = time.monotonic() if now_s is None else now_s
        if not self.try_lead():
            return PassResult(leader=False)
        result = PassResult(leader=True)
        if reap_due(now_s, self._last_reap_s, self.reaper_interval_s):
            result.reaped = self.broker.reap_expired()
            if self.history_max_jobs is not None:
                result.forgotten = self.broker.trim_history(self.history_max_jobs)
            self._last_reap_s = now_s
        return result

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set, then resign."""
        interval_s = tick_interval_s(self.reaper_interval_s, self.leader_lease_s)
        log.info("broker replica %s serving pool %s (reaper every %ss, leader lease %ss)",
                 self.replica, self.broker.pool, self.reaper_interval_s, self.leader_lease_s)
        try:
            while not stop.is_set():
                try:
                    self.run_once()
                except (redis.RedisError, FetchworkError):
                    log.exception("broker pass failed; retrying in %ss", interval_s)
                    self.is_leader = False
                stop.wait(interval_s)
        finally:
            try:
                self.resign()
            except (redis.RedisError, FetchworkError) as exc:
                log.warning("could not resign leadership: %s", exc)
