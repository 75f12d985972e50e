"""Reaching the broker's Redis through Redis Sentinel, so clients follow a failover.

`FETCHWORK_BROKER = redis+sentinel://host:port[,host:port...]/mastername[/db]`
(`rediss+sentinel://` for TLS) names the sentinels to ask and the master set
they watch. The client asks them where the master is, connects there, and
asks again when that connection breaks or the server says it is a replica
now, so after a failover every process goes on with the promoted replica.
A call that fails meanwhile raises the usual connection errors, which the
callers already ride out as they do any Redis outage (the reference hooks'
`through_outage`, the startd's next fetch, the broker service's next tick).

TLS files (FETCHWORK_BROKER_CA/_CERT/_KEY) apply to the sentinels and the
master alike; the Redis user and its password file to the master and its
replicas only: sentinels are asked without credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis
from redis.sentinel import MasterNotFoundError, Sentinel

from fetchwork.errors import RedisUnavailableError

SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
SENTINEL_PORT = 26379
_MASTER_NAME = re.compile(r"[A-Za-z0-9._-]+")
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+))"
                        r"(?::(?P<port>\d+))?")
# The options of client_options() that also concern connections to a sentinel.
_SENTINEL_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")


@dataclass(frozen=True)
class SentinelTarget:
    """What a redis+sentinel:// URL names."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int
    tls: bool
    username: str | None


class _Sentinels(Sentinel):
    """redis-py's Sentinel, with a short message when no master can be found (its own
    lists every sentinel client's options)."""

    def __init__(self, asked: tuple[tuple[str, int], ...], **kwargs: Any):
        super().__init__(list(asked), **kwargs)
        self.asked = asked

    def discover_master(self, service_name: str) -> Any:
        try:
            return super().discover_master(service_name)
        except MasterNotFoundError:
            hosts = ",".join(f"{host}:{port}" for host, port in self.asked)
            raise MasterNotFoundError(
                f"no sentinel at {hosts} answered with a master {service_name!r} that is up "
                "(sentinels unreachable, the master set unknown to them, or a failover "
                "under way)") from None


def is_sentinel_url(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEMES)


def _unclear(url: str, why: str) -> RedisUnavailableError:
    return RedisUnavailableError(
        f"FETCHWORK_BROKER={url!r} {why}; a Sentinel URL reads "
        "redis+sentinel://host:port[,host:port...]/mastername[/db]")


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, master name, db, TLS and user of `url` (pure); a clear error
    naming FETCHWORK_BROKER for anything unclear, and for a password in it."""
    scheme, _, rest = url.partition("://")
    if "?" in rest or "#" in rest:
        raise _unclear(url, "has a query or fragment, which fetchwork does not read")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        raise RedisUnavailableError(
            "FETCHWORK_BROKER carries a password; put the password in the file named by "
            "FETCHWORK_BROKER_PASSWORD_FILE instead")
    sentinels = tuple(_host_port(url, part) for part in hosts.split(","))
    names = path.split("/")
    if names and names[-1] == "":
        names.pop()  # one trailing slash
    if not names or not _MASTER_NAME.fullmatch(names[0]):
        raise _unclear(url, "names no master set after the sentinels")
    if len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise _unclear(url, f"has {'/'.join(names[1:])!r} where a database number may follow")
    db = int(names[1]) if len(names) == 2 else 0
    return SentinelTarget(sentinels, names[0], db, scheme == "rediss+sentinel",
                          unquote(userinfo) or None)


def _host_port(url: str, part: str) -> tuple[str, int]:
    found = _HOST_PORT.fullmatch(part)
    if not found:
        raise _unclear(url, f"has {part!r} where a sentinel's host:port belongs")
    port = int(found["port"]) if found["port"] else SENTINEL_PORT
    if not 0 < port < 65536:
        raise _unclear(url, f"has port {port} for a sentinel")
    return (found["v6"] or found["host"], port)


def check_sentinel_url(url: str) -> str:
    parse_sentinel_url(url)
    return url


def sentinel_client(url: str, options: dict[str, Any], **kwargs: Any) -> redis.Redis:
    """A client of the master that the sentinels of `url` name, following failovers.
    `options` are client_options() (TLS files, credentials); `kwargs` redis-py's own."""
    target = parse_sentinel_url(url)
    tls: dict[str, Any] = {"ssl": True} if target.tls else {}
    to_sentinels = {**tls, **{key: value for key, value in options.items()
                              if key in _SENTINEL_OPTIONS}}
    for key in ("socket_timeout", "socket_connect_timeout", "driver_info", "lib_name",
                "lib_version"):
        if key in kwargs:
            to_sentinels[key] = kwargs[key]
    sentinel = _Sentinels(target.sentinels, sentinel_kwargs=to_sentinels)
    client: redis.Redis = sentinel.master_for(target.master, db=target.db,
                                              **{**tls, **options, **kwargs})
    return client
