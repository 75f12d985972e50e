"""The broker service's Prometheus metrics, from the pool's event stream and queue.

A thread follows the pool's transition events (every client's submits,
claims and finishes pass through them, whichever process made them) and
counts them; the claim latency is the time a job waited between entering
the idle set and its claim, from the events' stream ids (milliseconds).
Every BROKER_METRICS_INTERVAL seconds it counts the queue's jobs by state and
owner. Served on BROKER_METRICS_PORT (off when empty) by prometheus_client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from fetchwork.config.loader import Config
from fetchwork.config.metricsport import metrics_port
from fetchwork.errors import FetchworkError

from .client import Broker

log = logging.getLogger(__name__)

READ_BATCH = 1000
BLOCK_MS = 1000
# Events that put a job into the idle set (start of its wait) and that end a claim.
TO_IDLE = {"IDLE"}
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800,
                     3600)


def stream_ms(entry_id: str) -> int:
    """The milliseconds part of a stream entry id (`<ms>-<seq>`)."""
    return int(entry_id.split("-", 1)[0])


class BrokerMetrics:
    """The pool's metrics in their own registry; `follow()` keeps them current."""

    def __init__(self, broker: Broker, recount_interval_s: float):
        self.broker = broker
        self.recount_interval_s = recount_interval_s
        self.registry = registry = CollectorRegistry()
        self.events = Counter("fetchwork_events_total", "Job transitions by type (Lua script)",
                              ["type"], registry=registry)
        self.submitted = Counter("fetchwork_jobs_submitted_total", "Jobs submitted",
                                 registry=registry)
        self.claimed = Counter("fetchwork_jobs_claimed_total", "Jobs claimed by a slot",
                               registry=registry)
        self.finished = Counter("fetchwork_jobs_finished_total",
                                "Claims ended by the execute side, by the job's new state",
                                ["state"], registry=registry)
        self.lease_expiries = Counter("fetchwork_lease_expiries_total",
                                      "Claimed jobs whose lease lapsed (reaped)", registry=registry)
        self.claim_latency = Histogram("fetchwork_claim_latency_seconds",
                                       "Time a job waited idle before a slot claimed it",
                                       buckets=LATENCY_BUCKETS_S, registry=registry)
        self.jobs = Gauge("fetchwork_jobs", "Jobs in the queue by state and owner",
                          ["state", "owner"], registry=registry)
        self._idle_since_ms: dict[str, int] = {}
        self._last_id = "$"

    # -- events ----------------------------------------------------------------

    def observe(self, entry_id: str, event: dict[str, str]) -> None:
        """Count one transition event."""
        kind, job, state = event.get("type", "?"), event.get("job", ""), event.get("state", "")
        self.events.labels(kind).inc()
        if kind == "edit":  # an attribute changed (qedit.lua); the job's wait did not
            return
        at_ms = stream_ms(entry_id)
        if kind == "submit":
            self.submitted.inc()
        elif kind == "claim":
            self.claimed.inc()
            since = self._idle_since_ms.pop(job, None)
            if since is not None:
                self.claim_latency.observe(max(0, at_ms - since) / 1000)
        elif kind == "finish":
            self.finished.labels(state).inc()
        elif kind == "reap":
            self.lease_expiries.inc()
        if state in TO_IDLE:
            self._idle_since_ms[job] = at_ms
        elif kind != "claim":
            self._idle_since_ms.pop(job, None)

    def read_events(self, block_ms: int) -> int:
        """Count the events after the last one seen (waiting up to `block_ms`); how many."""
        entries = self.broker.events(self._last_id, block_ms=block_ms, count=READ_BATCH)
        for entry_id, event in entries:
            self.observe(entry_id, event)
            self._last_id = entry_id
        if self._last_id == "$" and not entries:
            self._last_id = self.broker.last_event_id()
        return len(entries)

    # -- the queue ---------------------------------------------------------------

    def recount(self) -> None:
        """Set fetchwork_jobs{state, owner} from the queue's job hashes."""
        store, tally = self.broker.store, Tally[tuple[str, str]]()
        ids = self.broker.queued_ids()
        for state, owner in store.fields(ids, ("FetchworkState", "Owner")):
            if state is not None:
                tally[(str(state), str(owner) if owner is not None else "")] += 1
        self.jobs.clear()
        for (state, owner), count in tally.items():
            self.jobs.labels(state, owner).set(count)

    def follow(self, stop: threading.Event) -> None:
        """Count events and recount the queue until `stop` is set."""
        next_recount_s = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= next_recount_s:
                    self.recount()
                    next_recount_s = time.monotonic() + self.recount_interval_s
                self.read_events(BLOCK_MS)
            except (redis.RedisError, FetchworkError) as exc:
                log.warning("metrics: cannot read the pool: %s", exc)
                stop.wait(self.recount_interval_s)


def serve_broker_metrics(broker: Broker, config: Config,
                         stop: threading.Event) -> BrokerMetrics | None:
    """Start serving on BROKER_METRICS_PORT with a thread that follows the pool; None when
    the port is not set."""
    port = metrics_port(config, "BROKER_METRICS_PORT")
    if port is None:
        return None
    metrics = BrokerMetrics(broker, config.get_duration_s("BROKER_METRICS_INTERVAL"))
    start_http_server(port, registry=metrics.registry)
    threading.Thread(target=metrics.follow, args=(stop,), name="broker-metrics",
                     daemon=True).start()
    log.info("serving metrics on port %s", port)
    return metrics
