"""A Redis client for rq's Redis (RQ_URL), made as the broker's client is made.

RQ_URL takes every form FETCHWORK_BROKER takes (redis://, rediss:// with TLS,
unix://, redis+sentinel://), with RQ_CA, RQ_CERT, RQ_KEY, RQ_USERNAME and
RQ_PASSWORD_FILE in the parts of FETCHWORK_BROKER_CA, ...: the broker's URL to
client factory does the work, and its messages name the RQ_ knobs. The client
answers bytes, as rq needs. One client per process and configuration.
"""

from __future__ import annotations

import threading

import redis

from fetchwork.broker.connections import clients
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError

# The broker's knob each RQ_ knob stands in for.
_AS_BROKER = {"RQ_URL": "FETCHWORK_BROKER", "RQ_CA": "FETCHWORK_BROKER_CA",
              "RQ_CERT": "FETCHWORK_BROKER_CERT", "RQ_KEY": "FETCHWORK_BROKER_KEY",
              "RQ_USERNAME": "FETCHWORK_BROKER_USERNAME",
              "RQ_PASSWORD_FILE": "FETCHWORK_BROKER_PASSWORD_FILE"}

_lock = threading.Lock()
_clients: dict[tuple[str, ...], redis.Redis] = {}


def as_broker_config(config: Config) -> Config:
    """`config` with the broker's connection knobs set from the RQ_ ones (never a Cluster:
    rq does not run on one)."""
    values = {broker: (config.get(knob) or "").strip() for knob, broker in _AS_BROKER.items()}
    return config.with_values(FETCHWORK_BROKER_CLUSTER="false", **values)


def rq_message(message: str) -> str:
    """A connection error's message with the broker's knob names turned into the RQ_ ones."""
    for knob, broker in sorted(_AS_BROKER.items(), key=lambda item: -len(item[1])):
        message = message.replace(broker, knob)
    return message.replace("or unset it to use the embedded Redis", "rq's Redis")


def connect(config: Config) -> redis.Redis:
    """A client of rq's Redis, checked reachable; RedisUnavailableError naming RQ_URL."""
    key = tuple((config.get(knob) or "").strip() for knob in _AS_BROKER)
    with _lock:
        client = _clients.get(key)
    if client is not None:
        return client
    if not key[0]:
        raise RedisUnavailableError("RQ_URL is empty: set it to rq's Redis (redis://host:6379/0)")
    try:
        client = clients.connect(as_broker_config(config), start=False)
    except RedisUnavailableError as exc:
        raise RedisUnavailableError(rq_message(str(exc))) from exc
    with _lock:
        _clients.setdefault(key, client)
        return _clients[key]


def forget() -> None:
    """Drop the cached clients (tests; a process that forked)."""
    with _lock:
        _clients.clear()
