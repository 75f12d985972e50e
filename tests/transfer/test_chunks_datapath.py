"""The data path of big files on a real Redis: chunks read into two buffers used in
turn and sent as they are, written back from the machine's cache through the same
buffers, each chunk and the whole file checked on arrival: a chunk damaged in the
cache or in the pool is caught, and so is a file whose bytes do not make its digest."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
from pathlib import Path

import pytest
import redis

from fetchwork.broker.store import Store
from fetchwork.errors import TransferError
from fetchwork.transfer import stored
from fetchwork.transfer.cache import ChunkCache
from fetchwork.transfer.chunks import CHUNK_BYTES, ChunkStore
from fetchwork.transfer.manifest import FileEntry, Manifest

pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000
MB = 1 << 20


def _file(path: Path, size: int, seed: int) -> Path:
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def _upload(chunk_store: ChunkStore, path: Path) -> FileEntry:
    fd = os.open(path, os.O_RDONLY)
    try:
        return chunk_store.upload(fd, path.name, 0o644)
    finally:
        os.close(fd)


def _download(chunk_store: ChunkStore, entry: FileEntry, target: Path) -> bytes:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        chunk_store.download(entry, fd)
    finally:
        os.close(fd)
    return target.read_bytes()


def _filled(store: Store, root: Path, entry: FileEntry) -> ChunkCache:
    """A cache holding `entry`'s chunks, put by another object than the one returned
    (so reading them checks them again, as another slot's starter does)."""
    def fetch(digest: str) -> bytes | None:
        data = store.client.get(store.keys.xfer_chunk(digest))
        return data if isinstance(data, bytes) else None

    ChunkCache(root, 64 * MB).fill(entry.chunks, fetch, ahead=2)
    return ChunkCache(root, 64 * MB)


def _damage(cache: ChunkCache, digest: str, data: bytes) -> None:
    path = cache.root / digest[:2] / digest
    path.chmod(0o644)
    path.write_bytes(data)


def test_files_in_a_row_through_the_same_buffers_come_back_equal(store: Store,
                                                                 tmp_path: Path) -> None:
    sizes = (3 * CHUNK_BYTES + 5, 2 * CHUNK_BYTES, CHUNK_BYTES + 1, 17)
    sources = [_file(tmp_path / f"f{n}", size, seed=n) for n, size in enumerate(sizes)]
    up = ChunkStore(store, HOUR_MS)
    entries = [_upload(up, source) for source in sources]
    # A file of exactly two chunks is two chunks, not two and an empty one.
    assert [len(entry.chunks) for entry in entries] == [4, 2, 2, 1]
    for source, entry in zip(sources, entries, strict=True):
        assert entry.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
        assert entry.size == source.stat().st_size
    assert up.sent_bytes == sum(sizes)
    down = ChunkStore(store, 0)
    for source, entry in zip(sources, entries, strict=True):
        assert _download(down, entry, tmp_path / "back") == source.read_bytes()


def test_big_chunks_wait_pending_and_are_never_overwritten(store: Store,
                                                           tmp_path: Path) -> None:
    source = _file(tmp_path / "f", 2 * CHUNK_BYTES + 9, seed=7)
    entry = _upload(ChunkStore(store, HOUR_MS), source)
    keys = [store.keys.xfer_chunk(digest) for digest in entry.chunks]
    assert all(0 < store.client.pttl(key) <= HOUR_MS for key in keys)
    stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                  resend=lambda _missing: None)
    again = ChunkStore(store, HOUR_MS)
    assert _upload(again, source) == entry
    assert again.sent_bytes == 0
    assert all(store.client.pttl(key) == -1 for key in keys)  # attached: kept, no TTL


def test_a_corrupt_chunk_in_the_pool_is_caught_mid_file(store: Store, tmp_path: Path) -> None:
    source = _file(tmp_path / "f", 3 * CHUNK_BYTES + 1, seed=8)
    entry = _upload(ChunkStore(store, HOUR_MS), source)
    key = store.keys.xfer_chunk(entry.chunks[2])
    data = bytearray(store.client.get(key))
    data[1000] ^= 1
    store.client.set(key, bytes(data))
    with pytest.raises(TransferError, match="f: a chunk of this file is corrupt in the pool"):
        _download(ChunkStore(store, 0), entry, tmp_path / "back")


def test_a_corrupt_chunk_in_the_cache_is_dropped_and_fetched_again(store: Store,
                                                                   tmp_path: Path) -> None:
    source = _file(tmp_path / "f", 2 * CHUNK_BYTES + 100, seed=9)
    entry = _upload(ChunkStore(store, HOUR_MS), source)
    cache = _filled(store, tmp_path / "cache", entry)
    bad = bytearray(source.read_bytes()[CHUNK_BYTES:2 * CHUNK_BYTES])
    bad[5] ^= 0xFF
    _damage(cache, entry.chunks[1], bytes(bad))
    down = ChunkStore(store, 0, cache)
    assert _download(down, entry, tmp_path / "back") == source.read_bytes()
    assert down.received_bytes == CHUNK_BYTES  # only the damaged one, from the pool
    assert entry.chunks[1] not in cache


def test_a_cached_chunk_longer_than_a_chunk_is_damaged(store: Store, tmp_path: Path) -> None:
    source = _file(tmp_path / "f", CHUNK_BYTES + 3, seed=10)
    entry = _upload(ChunkStore(store, HOUR_MS), source)
    cache = _filled(store, tmp_path / "cache", entry)
    _damage(cache, entry.chunks[0], source.read_bytes()[:CHUNK_BYTES] + b"more")
    down = ChunkStore(store, 0, cache)
    assert _download(down, entry, tmp_path / "back") == source.read_bytes()
    assert down.received_bytes == CHUNK_BYTES


def test_a_chunk_damaged_in_the_cache_and_gone_from_the_pool_fails(store: Store,
                                                                  tmp_path: Path) -> None:
    source = _file(tmp_path / "f", 2 * CHUNK_BYTES + 1, seed=11)
    entry = _upload(ChunkStore(store, HOUR_MS), source)
    cache = _filled(store, tmp_path / "cache", entry)
    _damage(cache, entry.chunks[0], b"short")
    store.client.delete(store.keys.xfer_chunk(entry.chunks[0]))
    with pytest.raises(TransferError, match="f: a chunk of this file is missing from the pool"):
        _download(ChunkStore(store, 0, cache), entry, tmp_path / "back")


@pytest.mark.parametrize("change", ["sha256", "size", "order"])
def test_a_file_is_checked_whole_on_arrival(store: Store, tmp_path: Path, change: str) -> None:
    source = _file(tmp_path / "f", 2 * CHUNK_BYTES + 50, seed=12)
    entry = _upload(ChunkStore(store, HOUR_MS), source)
    wrong = {"sha256": dataclasses.replace(entry, sha256="0" * 64),
             "size": dataclasses.replace(entry, size=entry.size + 1),
             "order": dataclasses.replace(entry, chunks=(entry.chunks[1], entry.chunks[0],
                                                         entry.chunks[2]))}[change]
    for cache in (None, _filled(store, tmp_path / "cache", entry)):
        with pytest.raises(TransferError, match="arrived with another size or digest"):
            _download(ChunkStore(store, 0, cache), wrong, tmp_path / "back")


def test_chunks_go_up_on_a_connection_the_server_closed(store: Store) -> None:
    """The chunks' SETs go on the client's own pooled connections: one that Redis
    closed (its timeout, a restart) is made again before a chunk is sent on it."""
    data = bytearray(random.Random(13).randbytes(CHUNK_BYTES))
    digest = hashlib.sha256(data).hexdigest()
    store.client.ping()  # a connection in the client's pool
    pool = store.client.connection_pool
    other = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=pool.connection_class, **pool.connection_kwargs))
    try:
        assert other.client_kill_filter(_type="normal", skipme=True) >= 1
    finally:
        other.close()
    replies = ChunkStore(store, HOUR_MS)._put([(digest, memoryview(data))])
    assert replies and replies[0]
    assert store.client.get(store.keys.xfer_chunk(digest)) == bytes(data)
    assert 0 < store.client.pttl(store.keys.xfer_chunk(digest)) <= HOUR_MS
