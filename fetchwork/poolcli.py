"""`fetchwork up` and `fetchwork demo`: a whole local pool on one machine."""

from __future__ import annotations

import logging
import os
import signal

import click

from fetchwork.config.loader import get_config
from fetchwork.pool import Pool, PoolError

log = logging.getLogger(__name__)


def _how_to_reach(pool: Pool) -> str:
    prefix = ""
    if os.environ.get("FETCHWORK_STATE_DIR") or os.environ.get("_FETCHWORK_FETCHWORK_STATE_DIR"):
        prefix = f"FETCHWORK_STATE_DIR={pool.state_dir} "
    return (f"fetchwork pool up: state directory {pool.state_dir}, broker {pool.url}\n"
            f"From other terminals:\n"
            f"  {prefix}fetchwork submit job.sub     (or: fetchwork submit -- /bin/echo hi)\n"
            f"  {prefix}fetchwork q | history | status\n"
            f"  {prefix}fetchwork startd             (more slots join this pool)\n"
            f"Press Ctrl-C to stop the pool; running jobs are vacated and requeued.")


@click.command("up")
@click.option("--slots", type=click.IntRange(min=1), default=None,
              help="Slots of the local startd (default: NUM_SLOTS, the CPU count).")
def up_command(slots: int | None) -> None:
    """Run a whole local pool in the foreground.

    Starts the embedded Redis (its data kept in FETCHWORK_STATE_DIR), the
    broker service and a startd using the reference hooks, and writes
    pool.conf into the state directory so that other commands on this
    machine find the pool with no configuration. Ctrl-C stops everything.
    """
    root = logging.getLogger()
    if root.level > logging.INFO:  # a daemon says what it does, -v or not
        root.setLevel(logging.INFO)
    stop = {"requested": False}

    def request_stop(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping the pool", signal.Signals(signum).name)
        stop["requested"] = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    pool = Pool(get_config(), slots=slots)
    pool.start()
    click.echo(_how_to_reach(pool), err=True)
    dead = None
    try:
        dead = pool.wait(lambda: stop["requested"])
    finally:
        pool.stop()
    if dead:
        raise PoolError(f"{dead} ended unexpectedly; the pool was stopped")
    click.echo("fetchwork pool stopped.", err=True)

