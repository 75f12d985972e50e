"""The cache filled file by file on a real Redis, each chunk and each file checked in
the one pass that brings them, and the sandbox's copy made from the checked chunks
in the kernel, or by reading and writing where the kernel refuses."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import random
from pathlib import Path

import pytest

from fetchwork.broker.store import Store
from fetchwork.errors import TransferError
from fetchwork.transfer import filecopy
from fetchwork.transfer.cache import ChunkCache
from fetchwork.transfer.checkedfill import fill_checked
from fetchwork.transfer.chunks import CHUNK_BYTES, ChunkStore
from fetchwork.transfer.manifest import FileEntry
from tests.support.uploads import uploaded

pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000
MB = 1 << 20


class Fetches:
    """The pool's chunks as the starter fetches them, counted."""

    def __init__(self, store: Store):
        self.store = store
        self.asked: list[str] = []

    def __call__(self, digest: str) -> bytes | None:
        self.asked.append(digest)
        data = self.store.client.get(self.store.keys.xfer_chunk(digest))
        return data if isinstance(data, bytes) else None


def _written(cache: ChunkCache | None, store: Store, entry: FileEntry, target: Path) -> bytes:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        ChunkStore(store, 0, cache).download(entry, fd)
    finally:
        os.close(fd)
    return target.read_bytes()


def test_files_are_checked_as_they_fill_and_copied_from_their_chunks(store: Store,
                                                                     tmp_path: Path) -> None:
    big = uploaded(store, tmp_path / "big", 3 * CHUNK_BYTES + 7, seed=1)
    small = uploaded(store, tmp_path / "small", 1000, seed=2)
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    fetch = Fetches(store)
    assert fill_checked(cache, [big, small, big], fetch, ahead=2) == big.size + small.size
    assert sorted(fetch.asked) == sorted({*big.chunks, *small.chunks})  # each once
    for entry in (big, small):
        target = tmp_path / f"{entry.name}.back"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            assert cache.copy_file(entry.sha256, entry.size, entry.chunks, fd)
        finally:
            os.close(fd)
        assert target.read_bytes() == (tmp_path / entry.name).read_bytes()
    # A second fill (another job with the same input) fetches nothing.
    again = Fetches(store)
    assert fill_checked(ChunkCache(tmp_path / "cache", 64 * MB), [big], again) == 0
    assert again.asked == []


def test_a_corrupt_chunk_from_the_pool_is_caught_in_the_fill(store: Store,
                                                             tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "f", 3 * CHUNK_BYTES + 1, seed=3)
    key = store.keys.xfer_chunk(entry.chunks[1])
    data = bytearray(store.client.get(key))
    data[77] ^= 1
    store.client.set(key, bytes(data))
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    with pytest.raises(TransferError, match="f: a chunk of this file is corrupt in the pool"):
        fill_checked(cache, [entry], Fetches(store), ahead=2)
    assert entry.chunks[0] in cache
    assert entry.chunks[1] not in cache  # never kept


@pytest.mark.parametrize("change", ["sha256", "size", "order"])
def test_a_file_whose_digest_does_not_match_is_not_delivered(store: Store, tmp_path: Path,
                                                             change: str) -> None:
    entry = uploaded(store, tmp_path / "f", 2 * CHUNK_BYTES + 50, seed=4)
    wrong = {"sha256": dataclasses.replace(entry, sha256="0" * 64),
             "size": dataclasses.replace(entry, size=entry.size + 1),
             "order": dataclasses.replace(entry, chunks=(entry.chunks[1], entry.chunks[0],
                                                         entry.chunks[2]))}[change]
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    with pytest.raises(TransferError, match="f: the file arrived with another size or digest"):
        fill_checked(cache, [wrong], Fetches(store))
    fd = os.open(tmp_path / "back", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        assert not cache.copy_file(wrong.sha256, wrong.size, wrong.chunks, fd)
    finally:
        os.close(fd)
    with pytest.raises(TransferError, match="arrived with another size or digest"):
        _written(cache, store, wrong, tmp_path / "back")


def test_a_single_chunk_file_is_checked_against_its_own_digest(store: Store,
                                                               tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "f", 500, seed=5)
    wrong = dataclasses.replace(entry, sha256=hashlib.sha256(b"other").hexdigest())
    with pytest.raises(TransferError, match="another size or digest"):
        fill_checked(ChunkCache(tmp_path / "cache", MB), [wrong], Fetches(store))


def test_a_damaged_cached_chunk_is_fetched_again_in_the_fill(store: Store,
                                                             tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "f", 2 * CHUNK_BYTES + 100, seed=6)
    fill_checked(ChunkCache(tmp_path / "cache", 64 * MB), [entry], Fetches(store))
    path = tmp_path / "cache" / entry.chunks[1][:2] / entry.chunks[1]
    path.chmod(0o644)
    path.write_bytes(b"damaged")
    cache = ChunkCache(tmp_path / "cache", 64 * MB)  # another starter's
    fetch = Fetches(store)
    assert fill_checked(cache, [entry], fetch) == CHUNK_BYTES
    assert fetch.asked == [entry.chunks[1]]
    assert _written(cache, store, entry, tmp_path / "back") == (tmp_path / "f").read_bytes()


def test_a_chunk_gone_from_the_pool_is_reported_when_the_file_is_written(
        store: Store, tmp_path: Path) -> None:
    first = uploaded(store, tmp_path / "a", CHUNK_BYTES + 10, seed=7)
    second = uploaded(store, tmp_path / "b", CHUNK_BYTES + 20, seed=8)
    store.client.delete(store.keys.xfer_chunk(first.chunks[0]))
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    fill_checked(cache, [first, second], Fetches(store), ahead=1)
    assert _written(cache, store, second, tmp_path / "b.back") == (tmp_path / "b").read_bytes()
    with pytest.raises(TransferError, match="a: a chunk of this file is missing from the pool"):
        _written(cache, store, first, tmp_path / "a.back")


def test_a_chunk_evicted_after_the_fill_is_read_again(store: Store, tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "f", 2 * CHUNK_BYTES + 5, seed=9)
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    fill_checked(cache, [entry], Fetches(store))
    (tmp_path / "cache" / entry.chunks[2][:2] / entry.chunks[2]).unlink()
    assert _written(cache, store, entry, tmp_path / "back") == (tmp_path / "f").read_bytes()


def test_the_copy_falls_back_where_the_kernel_refuses_it(store: Store, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    entry = uploaded(store, tmp_path / "f", 2 * CHUNK_BYTES + 11, seed=10)
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    fill_checked(cache, [entry], Fetches(store))
    refused: list[int] = []

    def across_file_systems(source: int, target: int, count: int) -> int:
        refused.append(count)
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "copy_file_range", across_file_systems)
    assert _written(cache, store, entry, tmp_path / "back") == (tmp_path / "f").read_bytes()
    assert len(refused) == 3  # tried once a chunk, then read and written


def test_a_copy_refused_part_way_goes_on_from_where_it_stopped(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    data = random.Random(11).randbytes(3 * filecopy.PIECE_BYTES + 3)
    (tmp_path / "source").write_bytes(data)
    real = os.copy_file_range
    calls: list[int] = []

    def once_then_refused(source: int, target: int, count: int) -> int:
        calls.append(count)
        if len(calls) == 1:
            return real(source, target, 1000)
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(os, "copy_file_range", once_then_refused)
    source = os.open(tmp_path / "source", os.O_RDONLY)
    target = os.open(tmp_path / "target", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert filecopy.copy(source, target, len(data) + 50) == len(data)
    finally:
        os.close(source)
        os.close(target)
    assert (tmp_path / "target").read_bytes() == data
    assert len(calls) == 2


def test_a_copy_that_fails_for_real_is_an_error(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def full(source: int, target: int, count: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "copy_file_range", full)
    (tmp_path / "source").write_bytes(b"x" * 10)
    source = os.open(tmp_path / "source", os.O_RDONLY)
    target = os.open(tmp_path / "target", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space"):
            filecopy.copy(source, target, 10)
    finally:
        os.close(source)
        os.close(target)


def test_small_outputs_go_up_in_one_round_trip(store: Store, tmp_path: Path) -> None:
    """Small chunks held back are sent together by `flush`, each stored once."""
    chunk_store = ChunkStore(store, HOUR_MS, hold_small=True)
    entries = []
    for n in range(3):
        (tmp_path / f"o{n}").write_bytes(f"output {n}\n".encode())
        fd = os.open(tmp_path / f"o{n}", os.O_RDONLY)
        try:
            entries.append(chunk_store.upload(fd, f"o{n}", 0o644))
        finally:
            os.close(fd)
    assert all(store.client.get(store.keys.xfer_chunk(e.chunks[0])) is None for e in entries)
    chunk_store.flush()
    assert [store.client.get(store.keys.xfer_chunk(e.chunks[0])) for e in entries] == [
        f"output {n}\n".encode() for n in range(3)]
    assert chunk_store.sent_bytes == sum(e.size for e in entries)
    again = ChunkStore(store, HOUR_MS, hold_small=True)
    fd = os.open(tmp_path / "o0", os.O_RDONLY)
    try:
        again.upload(fd, "o0", 0o644)
    finally:
        os.close(fd)
    again.flush()
    assert again.sent_bytes == 0  # the pool had it
