"""The reference hooks' broker client: one per process, connected on first use.

A starter forked by the starter zygote would otherwise build its client from
nothing for every job (the redis-py client and its connection pool, the
Broker with its store, claimer and submitter: some 2 ms of CPU and a few
hundred copied pages per starter here; bench/startd_bench.py runs taken in
turn without this module gave 19.0 ms of starters' CPU a job against 16.9,
and 8 % fewer jobs a second). The zygote builds one before its
forks instead (`make_before_fork`), without connecting: redis-py's pool
notices the new process and makes its own connection at the first command,
so no socket is ever shared. A starter takes that client only when it was
built from the configuration the starter itself loads (the same files,
unchanged) and the same URL and credentials (the password file is read
again); else, and for Sentinel and Cluster clients (which talk to their
servers as they are made), it builds its own as any other process does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.clients import check_reachable, plain_client, plain_client_key
from fetchwork.config.loader import Config, get_config
from fetchwork.errors import FetchworkError


@dataclass(frozen=True)
class _Unconnected:
    config: Config
    key: tuple[str, dict[str, Any]]
    broker: Broker


_lock = threading.Lock()
_broker: Broker | None = None
_ahead: _Unconnected | None = None


def broker() -> Broker:
    """The process's broker client, connected on first use (never starts a server)."""
    global _broker, _ahead
    with _lock:
        if _broker is None:
            ahead, _ahead = _ahead, None
            config = get_config()
            _broker = _taken(ahead, config) or Broker.from_config(config, start=False)
        return _broker


def _taken(ahead: _Unconnected | None, config: Config) -> Broker | None:
    """The client built before the fork, connected, if it fits `config` as it is now."""
    if ahead is None or ahead.config is not config:
        return None
    key = plain_client_key(config)
    if key != ahead.key:
        return None
    check_reachable(ahead.broker.client, key[0])
    return ahead.broker


def reset() -> None:
    """Forget the cached client and any built before a fork (a reload, or tests)."""
    global _broker, _ahead
    with _lock:
        _broker = _ahead = None


def make_before_fork() -> None:
    """In the starter zygote: build the client its starters will connect (no I/O).
    Nothing is built when the configuration cannot give one; each starter's own
    first call then reports why."""
    global _ahead
    with _lock:
        _ahead = None
        try:
            config = Config.load()
            key = plain_client_key(config)
            if key is not None:
                pool = config.require("FETCHWORK_POOL").strip()
                _ahead = _Unconnected(config, key, Broker(plain_client(key), pool, config))
        except FetchworkError:
            pass
