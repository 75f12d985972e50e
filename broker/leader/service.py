"""The broker service: leadership through a Redis lease, and the lease reaper.

Any number of replicas may run. Each tick a replica extends the pool's
leader key when it holds it (leader_renew.lua, compare-and-extend) or takes
it when it is free (SET NX PX); only the leader reaps. A standby wakes when
the leader's lease ends (leader/leadership.py). The tick is
short enough to renew the leadership three times per BROKER_LEADER_LEASE,
and the reaper runs every BROKER_REAPER_INTERVAL. A leader that dies simply
stops renewing; another replica takes over when the key expires. The
leader resolves dependencies (broker/dependencies/resolver.py) on a thread woken by
the event stream, and sweeps the waiting jobs in `run_once` when due.

The leader also runs the pool's filters (filters/leader.py): it publishes
its filter summary, admits VALIDATING jobs, decides ACTIVATING ones and
releases holds whose HoldUntil passed. `run` does that on its own thread,
woken by the event stream; `run_once` does one such pass and waits for it.
A configuration the filters cannot use (DEFAULT_HOLD_DURATION out of range,
a chain naming an undefined filter) stops `from_config`: the broker refuses
to start.

The leader also runs backfill passes (broker/backfill/leader.py) on a thread
of their own, after transitions (at most every BACKFILL_MIN_INTERVAL, at once
on an event of the reserved job) and at least every POLICY_INTERVAL: the
reservation of the best idle job that cannot start, and its BypassCount.

With scheduling policy knobs set, the leader also runs policy passes
(broker/scheduling/leaderpass.py) on a thread of their own, after every transition and
at least every POLICY_INTERVAL; with none set, a new leader releases any job
a former policy left BLOCKED.

With BROKER_WRITE_USER_LOGS, the leader also appends each job's HTCondor user
log events to its UserLog (broker/userlog/writer.py), on a thread woken by the
event stream.
Every PERIODIC_EXPR_INTERVAL the leader also judges the job policy's
periodic_hold/release/remove expressions (broker/jobpolicy/periodic.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import redis

from fetchwork.broker.backfill.leader import BackfillLeader
from fetchwork.broker.backfill.plan import Plan
from fetchwork.broker.client import Broker
from fetchwork.broker.dependencies.resolver import DependencyResolver
from fetchwork.broker.filters.leader import POLL_S, FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.jobpolicy.periodic import PeriodicPolicy, PeriodicResult
from fetchwork.broker.scheduling.leaderpass import (
    SchedulingResult,
    SchedulingRunner,
    release_blocked,
)
from fetchwork.broker.userlog.writer import UserLogWriter
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError

from .leadership import leader_ttl_ms, standby_wait_s

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    leader: bool
    reaped: list[str] = field(default_factory=list)
    forgotten: int = 0
    scheduling: SchedulingResult | None = None
    periodic: PeriodicResult | None = None
    # Jobs waiting on dependencies that a sweep decided.
    dependencies: int = 0
    backfill: Plan | None = None


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
                 history_max_jobs: int | None = None, filters: FilterLeader | None = None,
                 user_logs: bool = False, periodic_interval_s: float | None = None,
                 dependency_sweep_s: float | None = None,
                 backfill: BackfillLeader | None = None, backfill_interval_s: float = 5.0):
        self.broker = broker
        # The backfill passes; None runs none (no reservation: nothing is held back).
        self.backfill = backfill
        self.backfill_interval_s = backfill_interval_s
        if filters is not None and backfill is not None:
            filters.is_backfill_start = backfill.is_backfill_start
        # The filter work of the leader; None runs none (no filters, no timed holds).
        self.filters = filters
        self.store = broker.store
        # The history keeps the newest finished jobs; None keeps them all.
        self.history_max_jobs = history_max_jobs
        self.reaper_interval_s = reaper_interval_s
        self.leader_lease_s = leader_lease_s
        self.replica = replica or default_replica_name()
        self.is_leader = False
        self._last_reap_s: float | None = None
        # The scheduling policy's passes; None while no policy knob is set.
        self.scheduling = SchedulingRunner.for_settings(broker.store, broker.scheduling)
        # The jobs' user logs (the submit command `log`); None writes none.
        self.userlog = UserLogWriter(self.store, self.replica) if user_logs else None
        # The job policy's periodic expressions; None (or an interval <= 0): never judged.
        self.periodic = (PeriodicPolicy(self.store, periodic_interval_s)
                         if periodic_interval_s is not None and periodic_interval_s > 0 else None)
        self.dependencies = DependencyResolver(broker.store, dependency_sweep_s)

    @classmethod
    def from_config(cls, broker: Broker, config: Config) -> BrokerService:
        return cls(broker,
                   reaper_interval_s=config.get_duration_s("BROKER_REAPER_INTERVAL"),
                   leader_lease_s=config.get_duration_s("BROKER_LEADER_LEASE"),
                   replica=(config.get("BROKER_REPLICA_NAME") or "").strip() or None,
                   history_max_jobs=config.get_int("BROKER_HISTORY_MAX_JOBS"),
                   filters=FilterLeader(broker.store, load_settings(config),
                                        broker.default_lease_s),
                   user_logs=config.get_bool("BROKER_WRITE_USER_LOGS"),
                   periodic_interval_s=config.get_duration_s("PERIODIC_EXPR_INTERVAL"),
                   dependency_sweep_s=config.get_duration_s("DEPENDENCY_SWEEP_INTERVAL"),
                   backfill=BackfillLeader.from_config(broker.store, config),
                   backfill_interval_s=config.get_duration_s("POLICY_INTERVAL"))

    def try_lead(self) -> bool:
        """Take or extend leadership; True while this replica leads."""
        lease_ms = max(1, int(self.leader_lease_s * 1000))
        leads = self.store.lead(self.replica, lease_ms)
        if leads != self.is_leader:
            log.info("replica %s %s leadership of pool %s", self.replica,
                     "took" if leads else "lost", self.broker.pool)
            self._last_reap_s = None
            if self.userlog is not None:
                self.userlog.reset()
        self.is_leader = leads
        return leads

    def resign(self) -> None:
        """Give leadership up (on shutdown) so another replica takes over at once."""
        if self.store.resign(self.replica):
            log.info("replica %s resigned leadership of pool %s", self.replica, self.broker.pool)
        self.is_leader = False

    def run_once(self, now_s: float | None = None, filter_pass: bool = True,
                 scheduling_pass: bool = True, userlog_pass: bool = True) -> PassResult:
        """One pass: renew leadership, and reap when leading and due; with
        `filter_pass`, one pass of the filters too, waited for; with `scheduling_pass`,
        a scheduling policy pass when one is due, then a backfill pass; with
        `userlog_pass`, every pending user log event written."""
        now_s = time.monotonic() if now_s is None else now_s
        if not self.try_lead():
            return PassResult(leader=False)
        result = PassResult(leader=True)
        if self.filters is not None:
            self.filters.publish()
            if filter_pass:
                for work in self.filters.run_pass():
                    work.result()
        if self.scheduling is None and self._last_reap_s is None:
            # Just took leadership with no policy: jobs a former policy blocked wait no more.
            release_blocked(self.store)
        result.dependencies = self.dependencies.sweep_if_due(now_s, self._last_reap_s is None)
        if reap_due(now_s, self._last_reap_s, self.reaper_interval_s):
            result.reaped = self.broker.reap_expired()
            if self.history_max_jobs is not None:
                result.forgotten = self.broker.trim_history(self.history_max_jobs)
            self._last_reap_s = now_s
        if scheduling_pass and self.scheduling is not None and self.scheduling.due(now_s):
            result.scheduling = self.scheduling.run_pass(monotonic_s=now_s)
        if userlog_pass and self.userlog is not None:
            self.userlog.drain()
        if self.periodic is not None and self.periodic.due(now_s):
            result.periodic = self.periodic.run_pass(monotonic_s=now_s)
        if scheduling_pass and self.backfill is not None:
            result.backfill = self.backfill.run_pass()
        return result

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set, then resign."""
        interval_s = tick_interval_s(self.reaper_interval_s, self.leader_lease_s)
        log.info("broker replica %s serving pool %s (reaper every %ss, leader lease %ss)",
                 self.replica, self.broker.pool, self.reaper_interval_s, self.leader_lease_s)
        filter_thread = None
        if self.filters is not None:
            filter_thread = threading.Thread(target=self._run_filters, args=(stop,),
                                             name="broker-filters", daemon=True)
            filter_thread.start()
        backfill_thread = None
        if self.backfill is not None:
            backfill_thread = threading.Thread(
                target=self.backfill.serve, name="broker-backfill", daemon=True,
                args=(stop, lambda: self.is_leader, self.backfill_interval_s))
            backfill_thread.start()
        policy_thread = None
        if self.scheduling is not None:
            policy_thread = threading.Thread(target=self._run_policy, args=(stop,),
                                             name="broker-policy", daemon=True)
            policy_thread.start()
        userlog_thread = None
        if self.userlog is not None:
            userlog_thread = threading.Thread(target=self._run_userlog, args=(stop,),
                                              name="broker-userlog", daemon=True)
            userlog_thread.start()
        deps_thread = threading.Thread(target=self._run_dependencies, args=(stop,),
                                       name="broker-dependencies", daemon=True)
        deps_thread.start()
        try:
            while not stop.is_set():
                try:
                    self.run_once(filter_pass=False, scheduling_pass=False, userlog_pass=False)
                except (redis.RedisError, FetchworkError):
                    log.exception("broker pass failed; retrying in %ss", interval_s)
                    self.is_leader = False
                stop.wait(interval_s if self.is_leader else
                          standby_wait_s(interval_s, leader_ttl_ms(self.store)))
        finally:
            if filter_thread is not None:
                filter_thread.join(timeout=5)
            if policy_thread is not None:
                policy_thread.join(timeout=5)
            if userlog_thread is not None:
                userlog_thread.join(timeout=5)
            deps_thread.join(timeout=5)
            if backfill_thread is not None:
                backfill_thread.join(timeout=5)
            try:
                self.resign()
            except (redis.RedisError, FetchworkError) as exc:
                log.warning("could not resign leadership: %s", exc)

    def _run_filters(self, stop: threading.Event) -> None:
        """The filter thread: a filter pass whenever an event arrives (or every
        POLL_S), while this replica leads."""
        assert self.filters is not None
        last_id = "$"
        try:
            while not stop.is_set():
                try:
                    if last_id == "$":
                        last_id = self.store.last_event_id()
                    if self.is_leader:
                        self.filters.run_pass()
                    events = self.store.events(last_id, block_ms=int(POLL_S * 1000), count=1000)
                    if events:
                        last_id = events[-1][0]
                except (redis.RedisError, FetchworkError):
                    log.exception("filter pass failed; retrying")
                    stop.wait(POLL_S)
        finally:
            self.filters.close()

    def _run_policy(self, stop: threading.Event) -> None:
        """The policy thread: a pass after each transition (at least every
        POLICY_INTERVAL) while this replica leads."""
        assert self.scheduling is not None
        interval_s = max(0.05, self.scheduling.settings.interval_s)
        while not stop.is_set():
            try:
                if self.is_leader and self.scheduling.due(time.monotonic()):
                    self.scheduling.run_pass()
                self.scheduling.wait_for_change(stop, interval_s)
            except (redis.RedisError, FetchworkError):
                log.exception("policy pass failed; retrying in %ss", interval_s)
                stop.wait(interval_s)

    def _run_userlog(self, stop: threading.Event) -> None:
        """The user log thread: write events as they arrive while this replica leads."""
        assert self.userlog is not None
        while not stop.is_set():
            try:
                if self.is_leader:
                    self.userlog.write_pass(block_ms=int(POLL_S * 1000))
                    if not self.userlog.leads:
                        stop.wait(POLL_S)
                else:
                    self.userlog.reset()
                    stop.wait(POLL_S)
            except Exception:  # a user log problem must never stop the broker
                log.exception("user log pass failed; retrying in %ss", POLL_S)
    def _run_dependencies(self, stop: threading.Event) -> None:
        """The dependency thread: decide the jobs waiting on the jobs each batch of
        events finished, while this replica leads."""
        last_id = "$"
        while not stop.is_set():
            try:
                if last_id == "$":
                    last_id = self.store.last_event_id()
                events = self.store.events(last_id, block_ms=int(POLL_S * 1000), count=1000)
                if events:
                    last_id = events[-1][0]
                    if self.is_leader:
                        self.dependencies.on_events(events)
            except (redis.RedisError, FetchworkError):
                log.exception("dependency pass failed; retrying")
                stop.wait(POLL_S)
