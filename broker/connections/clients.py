"""A Redis client for the configured broker, whatever form its URL takes.

FETCHWORK_BROKER names the broker (redis://, rediss://, unix://, or a
Sentinel URL); unset, the embedded server of the state directory is used,
started on demand. TLS files and credentials come from the knobs
connections/remote.py reads. On a Redis Cluster (FETCHWORK_BROKER_CLUSTER)
the client is one of the master serving the pool. A client that cannot
reach its server is reported once, naming the knob to check.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import redis

from fetchwork.config.loader import Config, get_config
from fetchwork.errors import RedisUnavailableError

from .embedded import embedded_for
from .remote import check_url, client_options, redacted
from .sentinel import is_sentinel_url, sentinel_client


def broker_url(config: Config | None = None, start: bool = True) -> str:
    """The Redis URL to use: FETCHWORK_BROKER, else the embedded server's (started on demand)."""
    config = config or get_config()
    url = (config.get("FETCHWORK_BROKER") or "").strip()
    if url:
        return check_url(url)
    server = embedded_for(config)
    if start:
        server.start()
    return server.url


@functools.cache
def _quiet_connection() -> dict[str, object]:
    """Connection options that skip CLIENT SETINFO: two round trips, and a look through
    every installed package for redis-py's version, on each new connection (each job's
    starter makes one)."""
    params = inspect.signature(redis.connection.AbstractConnection.__init__).parameters
    if "driver_info" in params:
        return {"driver_info": None}
    if "lib_name" in params:
        return {"lib_name": None, "lib_version": None}
    return {}


def connect(config: Config | None = None, start: bool = True, pool: str | None = None,
            **kwargs: object) -> redis.Redis:
    """A Redis client for the configured broker (bytes responses unless asked otherwise);
    TLS files and credentials come from the knobs connections/remote.py reads. On a Redis
    Cluster (FETCHWORK_BROKER_CLUSTER) it is a client of the master serving `pool`
    (default FETCHWORK_POOL)."""
    config = config or get_config()
    url = broker_url(config, start=start)
    client: redis.Redis
    if is_sentinel_url(url):  # Redis Sentinel: a client that follows failovers
        client = sentinel_client(url, client_options(url, config),
                                 **{**_quiet_connection(), **kwargs})
    elif _on_cluster(config):
        from .clusternode import pool_node_client

        pool = pool or config.require("FETCHWORK_POOL").strip()
        client = pool_node_client(url, pool, {**_quiet_connection(),
                                              **client_options(url, config), **kwargs})
    else:
        client = plain_client((url, client_options(url, config)), **kwargs)
    check_reachable(client, url)
    return client


def check_reachable(client: redis.Redis, url: str) -> None:
    """Connect `client` (a PING); RedisUnavailableError naming the knob when it cannot."""
    try:
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnavailableError(
            f"cannot reach the broker at {redacted(url)}: {exc}; check FETCHWORK_BROKER, "
            "or unset it to use the embedded Redis") from exc


def plain_client_key(config: Config) -> tuple[str, dict[str, Any]] | None:
    """What `connect(config, start=False)` makes a plain client from (its URL and the
    options from the knobs, credentials read now), or None for Sentinel and Cluster."""
    url = broker_url(config, start=False)
    if is_sentinel_url(url) or _on_cluster(config):
        return None
    return url, client_options(url, config)


def plain_client(key: tuple[str, dict[str, Any]], **kwargs: object) -> redis.Redis:
    """A plain client from its URL and options (`plain_client_key`); it connects at
    its first command (redis-py's pool makes a new connection in a forked process)."""
    url, options = key
    return redis.Redis.from_url(url, **{**_quiet_connection(), **options, **kwargs})


def _on_cluster(config: Config) -> bool:
    return bool((config.get("FETCHWORK_BROKER_CLUSTER") or "").strip()) \
        and config.get_bool("FETCHWORK_BROKER_CLUSTER")
