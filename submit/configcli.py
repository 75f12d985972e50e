"""`fetchwork config`: knob values, where they came from, and which are the pool's.

The pool's knobs (policy, limits, filters, templates, submission caps:
store/poolrules.py `is_pool_knob`) are what its broker service published,
whatever this machine's files say; the command asks the pool for them (it
never starts a Redis for that) and says which values are the pool's and
which are this machine's own (config/cli.py prints them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import click
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.store.poolrules import is_pool_knob
from fetchwork.config.cli import PoolView, show
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError


def pool_view(config: Config) -> PoolView:
    """What the configured pool published, or why there is nothing to show."""
    pool = (config.get("FETCHWORK_POOL") or "").strip()
    try:
        published = Broker.from_config(config, start=False).pool_rules()
    except (FetchworkError, redis.RedisError, OSError, ValueError) as exc:
        return PoolView(False, why=f"the pool {pool} could not be reached: {exc}")
    if published is None:
        return PoolView(False, why=f"the broker service of pool {pool} has not published "
                                   "the pool's rules yet")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(published.published_at_s))
    who = published.published_by or "its leader"
    return PoolView(True, published.knobs,
                    f"the leader of pool {pool} ({who}), version {published.version}, {when}")


@click.command("config")
@click.argument("names", nargs=-1)
@click.option("--dump", is_flag=True, help="Print every knob with the file and line that set it.")
@click.option("--verbose", "-V", "show_where", is_flag=True,
              help="With NAMES, also print where each value was set.")
def config_command(names: tuple[str, ...], dump: bool, show_where: bool) -> None:
    """Print the fully expanded value of each configuration knob NAME.

    Names are case-insensitive. Exits 1 when a name is not defined. With
    --dump, prints every knob, its value, the file and line that set it and
    the text as written (as condor_config_val -dump -verbose does).

    The pool's knobs (scheduling policy and limits, MAX_WALLTIME, filters,
    job templates, SUBMIT_MAX_JOB_ATTRS) print as the pool's broker service
    published them, since those are what the pool enforces: -V and --dump say
    which values are the pool's and which are this machine's own.
    """
    config = Config.load()
    if not dump and not names:
        raise click.UsageError("name a knob, or use --dump")
    wanted: Sequence[str] = names
    pool = pool_view(config) if dump or any(is_pool_knob(name) for name in wanted) else None
    status = show(config, wanted, dump, show_where, is_pool_knob, pool)
    if status:
        raise SystemExit(status)
