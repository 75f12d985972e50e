"""A pool's store: one Redis client, the pool's keys and its Lua scripts.

The client (must return bytes, redis-py's default), the pool's key schema
(store/keys.py) and its scripts (store/scripts.py), with the few operations every user
of them needs: running a transition script, reading job hashes and events,
and the leader lease. The client API, the claimer, the submitter and the
service each take a Store and reach Redis through it alone. One Store may be
shared by threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import redis

from fetchwork.errors import BrokerError, RedisUnavailableError

from . import calls, codec, eventbatch
from .keys import PoolKeys
from .scripts import Scripts

READ_BATCH = 1000
# Threads reading batches of job fields at once: the server runs one batch's
# script while the client packs the next and decodes the last.
READ_THREADS = 2


class Store:
    """The keys and scripts of one pool on one Redis."""

    def __init__(self, client: redis.Redis, pool: str, events_maxlen: int):
        if client.get_connection_kwargs().get("decode_responses"):
            raise BrokerError(codec.BYTES_CLIENT)
        self.client = client
        self.pool = pool
        try:
            self.keys = PoolKeys(pool)
        except ValueError as exc:
            raise BrokerError(f"{exc} (FETCHWORK_POOL)") from exc
        self.scripts = Scripts(client)
        # Approximate cap of the events stream (XADD MAXLEN ~).
        self.events_maxlen = events_maxlen

    def pool_keys(self) -> list[str]:
        """The keys every job transition script takes first (see lua/lib.lua)."""
        k = self.keys
        return [k.queue, k.idle, k.running, k.history, k.events, k.clusters,
                k.cluster_counter, k.seq_counter, k.head_counter,
                k.filters, k.validating, k.activating, k.blocks, k.reservations, k.holds,
                k.ac_groups, k.ac_members, k.ac_reps]

    def head_args(self, now_ms: int | None = None) -> list[str]:
        """The two arguments every job transition script takes first (see lua/lib.lua)."""
        return ["" if now_ms is None else str(now_ms), str(self.events_maxlen)]

    def run(self, name: str, job_ids: Sequence[str], args: Sequence[Any],
            now_ms: int | None = None, extra_keys: Sequence[str] = ()) -> Any:
        """Run transition script `name` on `job_ids` (their hashes follow the pool keys,
        then `extra_keys`): the one runner of store/calls.py's wrappers, which callers
        use instead."""
        keys = self.pool_keys() + [self.keys.job(job) for job in job_ids] + list(extra_keys)
        try:
            return self.scripts.call(name, keys, self.head_args(now_ms) + list(args))
        except redis.ConnectionError as exc:
            raise RedisUnavailableError(f"lost the broker's Redis: {exc}") from exc

    def hashes(self, job_ids: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """(id, to_dict-style mapping) of each existing job, in order (read_ads.lua)."""
        for start in range(0, len(job_ids), READ_BATCH):
            chunk = job_ids[start:start + READ_BATCH]
            reply = calls.read_ads(self, job_ids=chunk)
            for job, data in zip(chunk, codec.decode_packed_hashes(reply), strict=True):
                if data:
                    yield job, data

    def fields(self, job_ids: Sequence[str], names: Sequence[str]) -> Iterator[list[Any]]:
        """The values of attributes `names` of each job (None where absent), in order;
        a job that does not exist gives all None (read_fields.lua). Many jobs are read
        by READ_THREADS threads, so the next batch is sent while one is being decoded."""
        chunks = [job_ids[start:start + READ_BATCH]
                  for start in range(0, len(job_ids), READ_BATCH)]
        if len(chunks) < 2:
            for chunk in chunks:
                yield from self._fields(chunk, names)
            return
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="read-fields") as pool:
            for rows in pool.map(lambda chunk: self._fields(chunk, names), chunks):
                yield from rows

    def _fields(self, chunk: Sequence[str], names: Sequence[str]) -> list[list[Any]]:
        return list(codec.unpack(calls.read_fields(self, job_ids=chunk, names=names)))

    def members(self, key: str, start: int = 0, stop: int = -1, rev: bool = False) -> list[str]:
        """Members of sorted set `key` by rank, in one reply (read_ids.lua)."""
        return calls.read_ids(self, key=key, start=start, stop=stop, rev=rev)

    def events(self, last_id: str = "$", block_ms: int = 0,
               count: int = 100) -> list[tuple[str, dict[str, str]]]:
        """Transition events after `last_id` (`$`: only new ones, so use it with block_ms),
        from at most `count` stream entries: an entry that names a batch of jobs gives
        one event a job, all under its id (eventbatch.py)."""
        return eventbatch.expand_all(self.event_entries(last_id, block_ms, count))

    def event_entries(self, last_id: str = "$", block_ms: int = 0,
                      count: int = 100) -> list[tuple[str, dict[str, str]]]:
        """At most `count` stream entries after `last_id` as written: one that names a
        batch of jobs stays one entry, its 'jobs' field unread. For a reader that needs
        only what an entry's jobs have in common (their state) or the ids: a batch of
        100,000 jobs costs it one entry, where `events` makes a dict a job."""
        reply: Any = self.client.xread({self.keys.events: last_id}, count=count,
                                       block=block_ms if block_ms > 0 else None)
        return [(codec.text(entry_id), {codec.text(k): codec.text(v) for k, v in fields.items()})
                for _stream, entries in reply or [] for entry_id, fields in entries]

    def last_event_id(self) -> str:
        """Id of the newest event ("0-0" when there is none)."""
        newest: Any = self.client.xrevrange(self.keys.events, count=1)
        return codec.text(newest[0][0]) if newest else "0-0"

    def lead(self, replica: str, lease_ms: int) -> bool:
        """Extend `replica`'s leadership (leader_renew.lua) or take it when free (SET NX PX)."""
        if calls.leader_renew(self, replica=replica, lease_ms=lease_ms):
            return True
        return bool(self.client.set(self.keys.leader, replica, nx=True, px=lease_ms))

    def resign(self, replica: str) -> bool:
        """Give up `replica`'s leadership; False when it did not lead."""
        return calls.leader_resign(self, replica=replica)

    def scored(self, key: str, low: str = "-inf", high: str = "+inf",
               count: int | None = None) -> list[tuple[bytes, float]]:
        """(member, score) of sorted set `key` with scores in [low, high] (`(x` for an
        open end), lowest first; at most `count`."""
        reply = self.client.zrangebyscore(key, low, high, start=None if count is None else 0,
                                          num=count, withscores=True)
        return cast(list[tuple[bytes, float]], reply)

    def scored_by_rank(self, key: str, start: int, stop: int) -> list[tuple[bytes, float]]:
        """(member, score) of sorted set `key` from rank `start` to `stop`."""
        return cast(list[tuple[bytes, float]],
                    self.client.zrange(key, start, stop, withscores=True))

    @staticmethod
    def ids(raw: Iterable[Any]) -> list[str]:
        """Job ids (or other members) as text, from a Redis reply of bytes."""
        return [codec.text(item) for item in raw]
