"""`fetchwork broker`: run a broker replica (leadership and the lease reaper)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import get_config

from .client import Broker
from .metrics import serve_broker_metrics

log = logging.getLogger(__name__)


@click.command("broker")
@click.option("--once", is_flag=True,
              help="One pass (take leadership if free, reap lapsed leases, resign), then exit.")
def broker_command(once: bool) -> None:
    """Run a broker replica for FETCHWORK_POOL.

    Any number of replicas may run; the one holding the pool's leader lease
    (BROKER_LEADER_LEASE) reaps jobs whose lease lapsed every
    BROKER_REAPER_INTERVAL seconds. SIGTERM or Ctrl-C stops it and gives the
    leadership up. With BROKER_METRICS_PORT set it serves Prometheus
    metrics on that port (/metrics). The leader also appends each job's
    events to the job event log its submit file's `log` names
    (BROKER_WRITE_USER_LOGS): that path must be reachable from here.
    """
    logging.getLogger("fetchwork").setLevel(
        min(logging.INFO, logging.getLogger().getEffectiveLevel()))
    config = get_config()
    service = BrokerService.from_config(Broker.from_config(config), config)
    if once:
        result = service.run_once()
        service.resign()
        role = "leader" if result.leader else "not leader"
        click.echo(f"pool {service.broker.pool}: {role}; reaped {len(result.reaped)} job(s)"
                   + (": " + " ".join(result.reaped) if result.reaped else ""))
        return
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    serve_broker_metrics(service.broker, config, stop)
    service.run(stop)

