"""The broker service: leadership through a Redis lease, the lease reaper, and
the duties only the leader runs.

Any number of replicas may run. Each tick a replica extends the pool's
leader key when it holds it (leader_renew.lua, compare-and-extend) or takes
it when it is free (SET NX PX); only the leader reaps. A standby wakes when
the leader's lease ends (leader/leadership.py). The tick is short enough to
renew the leadership three times per BROKER_LEADER_LEASE, and the reaper
runs every BROKER_REAPER_INTERVAL. A leader that dies simply stops
renewing; another replica takes over when the key expires. On taking the
lead with no scheduling policy, the leader releases any job a former policy
left BLOCKED; while it leads, its tick publishes the pool's rules that
submissions are checked against, with the filter summary claims read
(leader/publish.py): until a leader has published them, new jobs wait for it.

The leader's duties (leader/duty.py, fed by the one reader of the event
stream in leader/reader.py, started and stopped together by `run`; the
dependencies and the user logs read events only while the pool uses them,
leader/interest.py):

- the filters (broker/filters/leader.py): admit VALIDATING jobs, decide
  ACTIVATING ones, release holds whose HoldUntil passed; a pass on every
  batch of events (with a filter or template configured) and every POLL_S.
  A pool that only signs its jobs wakes them on a change of the validating
  set instead, read from no event (leader/watch.py).
  A configuration the filters cannot use (DEFAULT_HOLD_DURATION out of
  range, a chain naming an undefined filter) stops `from_config`: the
  broker refuses to start.
- the dependencies (broker/dependencies/resolver.py): the jobs waiting on
  the jobs each batch finished, and a sweep on taking the lead and every
  DEPENDENCY_SWEEP_INTERVAL.
- the user logs, with BROKER_WRITE_USER_LOGS (broker/userlog/writer.py):
  each job's HTCondor user log events appended to its UserLog.
- the scheduling policy, with a policy knob set (broker/scheduling/leaderpass.py):
  a pass after every transition and at least every POLICY_INTERVAL.
- backfill (broker/backfill/leader.py): the reservation of the best idle job
  that cannot start, and its BypassCount, after transitions (at most every
  BACKFILL_MIN_INTERVAL, at once on an event of the reserved job) and at
  least every POLICY_INTERVAL; while the queue flows, a pass is one read of
  the idle head (broker/backfill/waiting.py).
- the job policy's periodic expressions (broker/jobpolicy/periodic.py), every
  PERIODIC_EXPR_INTERVAL.

`run_once` (tests, `fetchwork broker --once`) does one tick and then, in
turn on the calling thread, each duty's pass when it is due, each reading
what it needs itself (the user log writer from its stored position, the
backfill pass the events since its last).
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
from fetchwork.broker.filters.gate import Summary
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.jobpolicy.periodic import PeriodicPolicy, PeriodicResult
from fetchwork.broker.scheduling.leaderpass import (
    SchedulingResult,
    SchedulingRunner,
    release_blocked,
)
from fetchwork.broker.trust.desk import RequestDesk
from fetchwork.broker.trust.requests import super_users
from fetchwork.broker.trust.signer import pool_signer
from fetchwork.broker.userlog.writer import UserLogWriter
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError

from .duty import Duty
from .interest import wrapped
from .leadership import leader_ttl_ms, standby_wait_s
from .publish import RulesPublisher
from .reader import LeaderDuties

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
                 backfill: BackfillLeader | None = None, rules: RulesPublisher | None = None,
                 desk: RequestDesk | None = None):
        self.broker = broker
        # People's requests (broker/trust/desk.py); None serves none.
        self.desk = desk
        # The backfill passes; None runs none (no reservation: nothing is held back).
        self.backfill = backfill
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
        # The pool's rules, published on every tick (by default: the broker's configuration).
        self.rules = rules or RulesPublisher.from_config(
            broker.store, broker.config, filters.summary() if filters is not None else Summary(),
            self.replica)
        if filters is not None and filters.rules is None:
            filters.rules = self.rules.rules  # admission checks the rules it publishes
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
        signer = pool_signer(config)
        replica = (config.get("BROKER_REPLICA_NAME") or "").strip() or default_replica_name()
        filters = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                               signer=signer)
        return cls(broker,
                   reaper_interval_s=config.get_duration_s("BROKER_REAPER_INTERVAL"),
                   leader_lease_s=config.get_duration_s("BROKER_LEADER_LEASE"),
                   replica=replica,
                   history_max_jobs=config.get_int("BROKER_HISTORY_MAX_JOBS"),
                   filters=filters,
                   rules=RulesPublisher.from_config(broker.store, config, filters.summary(),
                                                    replica),
                   user_logs=config.get_bool("BROKER_WRITE_USER_LOGS"),
                   periodic_interval_s=config.get_duration_s("PERIODIC_EXPR_INTERVAL"),
                   dependency_sweep_s=config.get_duration_s("DEPENDENCY_SWEEP_INTERVAL"),
                   backfill=BackfillLeader.from_config(broker.store, config),
                   desk=RequestDesk(broker.store, broker,
                                    super_users(config.get("QUEUE_SUPER_USERS")),
                                    signer.signature if signer else None))

    def duties(self) -> list[Duty]:
        """The duties this replica runs while it leads."""
        duties: list[Duty] = []
        if self.filters is not None:
            duties.append(self.filters)
        duties.append(self.dependencies)
        if self.userlog is not None:
            duties.append(self.userlog)
        if self.scheduling is not None:
            duties.append(self.scheduling)
        if self.backfill is not None:
            duties.append(self.backfill)
        if self.periodic is not None:
            duties.append(self.periodic)
        if self.desk is not None:
            duties.append(self.desk)
        return [wrapped(duty, self.store) for duty in duties]

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
        result = self._tick(now_s, filter_pass=filter_pass, sweep=True)
        if not result.leader:
            return result
        if scheduling_pass and self.scheduling is not None and self.scheduling.due(now_s):
            result.scheduling = self.scheduling.run_pass(monotonic_s=now_s)
        if userlog_pass and self.userlog is not None:
            self.userlog.drain()
        if self.periodic is not None and self.periodic.due(now_s):
            result.periodic = self.periodic.run_pass(monotonic_s=now_s)
        if self.desk is not None:
            self.desk.run_pass()
        if scheduling_pass and self.backfill is not None:
            result.backfill = self.backfill.run_pass()
        return result

    def _tick(self, now_s: float, filter_pass: bool, sweep: bool) -> PassResult:
        """Renew leadership; when leading, publish the pool's rules (with
        `filter_pass`, a filter pass, waited for), release what a former policy left
        BLOCKED on taking the lead, sweep the dependencies when due (with `sweep`),
        and reap (and trim the history) when due."""
        if not self.try_lead():
            return PassResult(leader=False)
        result = PassResult(leader=True)
        took_lead = self._last_reap_s is None
        self.rules.publish()
        if self.filters is not None:
            if filter_pass:
                for work in self.filters.run_pass():
                    work.result()
        if self.scheduling is None and took_lead:
            # Just took leadership with no policy: jobs a former policy blocked wait no more.
            release_blocked(self.store)
        if sweep:
            result.dependencies = self.dependencies.sweep_if_due(now_s, took_lead)
        if reap_due(now_s, self._last_reap_s, self.reaper_interval_s):
            result.reaped = self.broker.reap_expired()
            if self.history_max_jobs is not None:
                result.forgotten = self.broker.trim_history(self.history_max_jobs)
            self._last_reap_s = now_s
        return result

    def run(self, stop: threading.Event) -> None:
        """Tick after tick until `stop` is set, the duties running on their threads
        while this replica leads; then stop them and resign."""
        interval_s = tick_interval_s(self.reaper_interval_s, self.leader_lease_s)
        log.info("broker replica %s serving pool %s (reaper every %ss, leader lease %ss)",
                 self.replica, self.broker.pool, self.reaper_interval_s, self.leader_lease_s)
        try:
            with LeaderDuties(self.store, self.duties()) as duties:
                while not stop.is_set():
                    try:
                        self._tick(time.monotonic(), filter_pass=False, sweep=False)
                    except (redis.RedisError, FetchworkError):
                        log.exception("broker pass failed; retrying in %ss", interval_s)
                        self.is_leader = False
                    duties.set_leading(self.is_leader)
                    stop.wait(interval_s if self.is_leader else
                              standby_wait_s(interval_s, leader_ttl_ms(self.store)))
        finally:
            try:
                self.resign()
            except (redis.RedisError, FetchworkError) as exc:
                log.warning("could not resign leadership: %s", exc)
