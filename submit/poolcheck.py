"""Telling the user what the user commands did to the pool: starting the
embedded Redis because none was running, queueing jobs that no startd
will run because none has reported lately, and queueing jobs that wait for
a broker service because the pool's rules were never published (the pool
fails closed)."""

from __future__ import annotations

import click

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import embedded_for
from fetchwork.config.loader import Config
from fetchwork.submit import submitting


def start_queue(config: Config) -> None:
    """Start the embedded Redis when no broker is configured and none runs,
    and say so: it keeps running in the background until stopped."""
    if (config.get("FETCHWORK_BROKER") or "").strip():
        return
    server = embedded_for(config)
    if not server.start():
        return
    pid = server.server_pid()
    click.echo(f"fetchwork: no pool was running: started a Redis server for the queue in the "
               f"background (pid {pid if pid is not None else '?'}, state directory "
               f"{config.get('FETCHWORK_STATE_DIR')}). It keeps running until "
               "`fetchwork redis stop`; `fetchwork up` runs a pool that executes jobs.",
               err=True)


def warn_without_startd(broker: Broker) -> None:
    """Warn when no slot ad is current: the jobs wait until a startd runs."""
    if broker.slots():
        return
    lifetime_s = Config.load().get_duration_s("SLOT_AD_LIFETIME")
    click.echo(f"fetchwork: warning: no startd has reported in the last {lifetime_s:g} s "
               "(SLOT_AD_LIFETIME); the jobs stay idle until one runs (`fetchwork up`).",
               err=True)


def say_unpublished(broker: Broker, count: int) -> None:
    """Say that `count` jobs wait because the pool's broker service never published
    the pool's rules, and whether one runs to admit them."""
    running = submitting.leader_running(broker)
    click.echo(f"fetchwork: the pool's broker service has not published the pool's rules "
               f"yet, so the {count} job(s) wait (VALIDATING) until it admits them under "
               "its own configuration"
               + ("." if running else "; no broker service leads the pool now "
                  "(`fetchwork up` or `fetchwork broker` runs one)."), err=True)
