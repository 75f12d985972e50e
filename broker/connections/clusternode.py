"""A pool on Redis Cluster: a plain client on the master that serves the pool's slot.

With `FETCHWORK_BROKER_CLUSTER = True`, `FETCHWORK_BROKER` names any node of
a Redis Cluster (`redis://host:port`, `rediss://` for TLS). Every key of pool
P carries the hash tag `{P}` (store/keys.py), so the whole pool lives in one slot
on one master. The broker talks to that master with an ordinary client rather
than a cluster client: Lua scripts by SHA, MULTI/EXEC transactions, pipelines
and the blocking XREAD of the event stream all run unchanged, because each of
them touches only the pool's slot. Pools are spread over the masters by their
names' slots.

When the slot moves (resharding, a replica promoted by the cluster), the old
node answers MOVED; the client then points at the node the answer names and
sends the command again. When the node cannot be reached at all, the client
asks the cluster once where the slot lives now and follows it if it moved.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, MovedError, TryAgainError

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.errors import RedisUnavailableError

from .remote import redacted

log = logging.getLogger(__name__)

DEFAULT_PORT = 6379
# Seconds a node may take to connect and answer CLUSTER SLOTS.
SLOT_MAP_TIMEOUT_S = 5.0
# Redirections one command follows before its error reaches the caller.
MAX_REDIRECTS = 3
# Answers of a node that cannot serve the slot just now (a master rejoining,
# a failover under way): callers see them as an unreachable Redis and retry.
NOT_NOW = (ClusterDownError, TryAgainError)


def _unavailable(exc: Exception) -> redis.ConnectionError:
    return redis.ConnectionError(f"the pool's Redis Cluster slot cannot be served now: {exc}")


def pool_slot(pool: str) -> int:
    """The Redis Cluster hash slot of every key of `pool`."""
    return key_slot(PoolKeys(pool).queue.encode())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def slot_master(client: redis.Redis, slot: int) -> tuple[str, int] | None:
    """(host, port) of the master serving `slot` by the CLUSTER SLOTS answer of `client`'s
    node; None when no master serves it."""
    for start, end, master, *_replicas in client.execute_command("CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            host = _text(master[0])
            if not host or host == "?":  # the node does not know its own address
                host = client.connection_pool.connection_kwargs["host"]
            return host, int(master[1])
    return None


class PoolNodeClient(redis.Redis):
    """A client of the master serving one pool's slot; follows the slot when it moves."""

    def __init__(self, seed: tuple[str, int], pool: str, options: dict[str, Any]):
        self._seeds = [seed]
        self._slot = pool_slot(pool)
        self._options = options
        self.moves = 0  # times the slot was followed to another node
        owner = self._ask_cluster()
        if owner is None:
            raise RedisUnavailableError(
                f"no master of the Redis Cluster at {seed[0]}:{seed[1]} serves slot "
                f"{self._slot} of pool {pool}; check the cluster (redis-cli --cluster check)")
        super().__init__(host=owner[0], port=owner[1], **options)

    def _ask_cluster(self) -> tuple[str, int] | None:
        """The slot's master by the first node (of the seed and those seen) that answers."""
        failure: redis.RedisError | None = None
        for host, port in list(self._seeds):
            node = redis.Redis(host=host, port=port, **{
                **self._options, "socket_connect_timeout": SLOT_MAP_TIMEOUT_S,
                "socket_timeout": SLOT_MAP_TIMEOUT_S})
            try:
                owner = slot_master(node, self._slot)
            except redis.RedisError as exc:
                failure = exc
                continue
            finally:
                node.close()
            if owner is not None and owner not in self._seeds:
                self._seeds.append(owner)
            return owner
        if failure is not None:
            raise failure
        return None

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) this client sends its commands to."""
        kwargs = self.connection_pool.connection_kwargs
        return kwargs["host"], int(kwargs["port"])

    def _move_to(self, host: str, port: int) -> None:
        if (host, port) == self.address:
            return
        log.warning("pool slot %s moved from %s:%s to %s:%s", self._slot, *self.address,
                    host, port)
        self.moves += 1
        old = self.connection_pool
        self.connection_pool = redis.ConnectionPool(
            connection_class=old.connection_class,
            **{**old.connection_kwargs, "host": host, "port": port})
        old.disconnect()
        if (host, port) not in self._seeds:
            self._seeds.append((host, port))

    def _rediscover(self) -> bool:
        """Ask the cluster where the slot lives; True when it moved to another node."""
        try:
            owner = self._ask_cluster()
        except redis.RedisError as exc:
            log.debug("cannot read the cluster's slot map: %s", exc)
            return False
        if owner is None or owner == self.address:
            return False
        self._move_to(*owner)
        return True

    def execute_command(self, *args: Any, **options: Any) -> Any:
        for _ in range(MAX_REDIRECTS):
            try:
                return super().execute_command(*args, **options)
            except MovedError as exc:
                if exc.slot_id != self._slot:  # a key outside the pool: not ours to follow
                    raise
                self._move_to(exc.host, exc.port)
            except redis.ConnectionError:
                if not self._rediscover():
                    raise
            except NOT_NOW as exc:
                raise _unavailable(exc) from exc
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> PoolNodePipeline:
        pipe = PoolNodePipeline(self.connection_pool, self.response_callbacks, transaction,
                                shard_hint)
        pipe.owner = self
        return pipe


class PoolNodePipeline(redis.client.Pipeline):
    """A pipeline of a PoolNodeClient: a MOVED answer re-points the client for the next
    call; it and a cluster answering "not now" reach the caller as a ConnectionError."""

    owner: PoolNodeClient | None = None

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except MovedError as exc:
            if self.owner is None or exc.slot_id != self.owner._slot:
                raise
            self.owner._move_to(exc.host, exc.port)
            raise _unavailable(exc) from exc
        except NOT_NOW as exc:
            raise _unavailable(exc) from exc


def pool_node_client(url: str, pool: str, options: dict[str, Any]) -> PoolNodeClient:
    """A client for `pool` on the Redis Cluster that `url` names one node of."""
    if url.startswith("unix://"):
        raise RedisUnavailableError(
            "FETCHWORK_BROKER_CLUSTER needs FETCHWORK_BROKER to name a cluster node as "
            "redis://host:port or rediss://host:port, not a unix socket")
    parts = urlsplit(url)
    tls = {"ssl": True} if url.startswith("rediss://") else {}
    try:
        return PoolNodeClient((parts.hostname or "localhost", parts.port or DEFAULT_PORT), pool,
                              {**options, **tls})
    except redis.RedisError as exc:
        raise RedisUnavailableError(
            f"cannot read the Redis Cluster's slot map from {redacted(url)}: {exc}; check "
            "FETCHWORK_BROKER, or set FETCHWORK_BROKER_CLUSTER = False for a single "
            "Redis") from exc
