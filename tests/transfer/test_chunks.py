"""The chunk store and manifests on a real Redis: files go up and come back chunk by
chunk, verified; a chunk the pool has is not sent again; manifests are counted by
the jobs that need them and freed with their chunks at none; the pool's cap refuses
what would pass it; a job leaving the queue drops its input's reference."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.store import Store
from fetchwork.config.loader import Config
from fetchwork.errors import SubmitError, TransferError
from fetchwork.transfer import chunks, delivery, stored
from fetchwork.transfer.chunks import CHUNK_BYTES, ChunkStore
from fetchwork.transfer.manifest import Manifest, check_name, unpack

pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000


def _file(path: Path, size: int, seed: int = 1) -> Path:
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def _upload(chunk_store: ChunkStore, path: Path, name: str) -> object:
    fd = os.open(path, os.O_RDONLY)
    try:
        return chunk_store.upload(fd, name, 0o644)
    finally:
        os.close(fd)


def _roundtrip(chunk_store: ChunkStore, entry: object, target: Path) -> bytes:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        chunk_store.download(entry, fd)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return target.read_bytes()


def test_a_file_goes_up_in_chunks_and_comes_back_equal(store: Store, tmp_path: Path) -> None:
    source = _file(tmp_path / "big", 2 * CHUNK_BYTES + 123)
    up = ChunkStore(store, HOUR_MS)
    entry = _upload(up, source, "big")
    assert entry.size == source.stat().st_size
    assert len(entry.chunks) == 3
    assert entry.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert up.sent_bytes == entry.size
    down = ChunkStore(store, HOUR_MS)
    assert _roundtrip(down, entry, tmp_path / "back") == source.read_bytes()
    assert down.received_bytes == entry.size


def test_an_empty_file_is_one_empty_chunk(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "empty"
    source.write_bytes(b"")
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, source, "empty")
    assert entry.size == 0 and len(entry.chunks) == 1
    assert _roundtrip(chunk_store, entry, tmp_path / "back") == b""


def test_a_chunk_the_pool_has_is_not_sent_again(store: Store, tmp_path: Path) -> None:
    source = _file(tmp_path / "f", CHUNK_BYTES + 10)
    first = ChunkStore(store, HOUR_MS)
    _upload(first, source, "f")
    again = ChunkStore(store, HOUR_MS)
    _upload(again, source, "g")
    assert first.sent_bytes == CHUNK_BYTES + 10 and again.sent_bytes == 0


def test_a_big_file_goes_up_in_batches_and_only_what_is_missing(store: Store,
                                                               tmp_path: Path) -> None:
    size = 5 * CHUNK_BYTES + 7
    source = _file(tmp_path / "f", size, seed=3)
    first = ChunkStore(store, HOUR_MS)
    entry = _upload(first, source, "f")
    assert first.sent_bytes == size and len(entry.chunks) == 6  # type: ignore[attr-defined]
    assert entry.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()  # type: ignore[attr-defined]
    # a resumed upload: two chunks lapsed, another is about to; only the two go again
    keys = [store.keys.xfer_chunk(d) for d in entry.chunks]  # type: ignore[attr-defined]
    store.client.delete(keys[1], keys[4])
    store.client.pexpire(keys[2], 5000)
    again = ChunkStore(store, HOUR_MS)
    assert _upload(again, source, "f") == entry
    assert again.sent_bytes == 2 * CHUNK_BYTES
    assert store.client.pttl(keys[2]) > 5000  # a pending chunk met again is kept longer
    assert _roundtrip(again, entry, tmp_path / "back") == source.read_bytes()


def test_a_file_of_exactly_one_chunk_is_one_chunk(store: Store, tmp_path: Path) -> None:
    source = _file(tmp_path / "f", CHUNK_BYTES, seed=4)
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, source, "f")
    assert entry.chunks == (entry.sha256,)  # type: ignore[attr-defined]
    assert _roundtrip(chunk_store, entry, tmp_path / "back") == source.read_bytes()


def test_pending_chunks_carry_a_ttl_until_attached(store: Store, tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, _file(tmp_path / "f", 100), "f")
    key = store.keys.xfer_chunk(entry.chunks[0])
    assert 0 < store.client.pttl(key) <= HOUR_MS
    manifest = Manifest(files=(entry,))
    stored.attach(store, manifest, jobs=2, cap_bytes=0, resend=lambda _d: None)
    assert store.client.pttl(key) == -1
    assert int(store.client.get(store.keys.xfer_bytes)) == 100


def test_a_corrupt_or_missing_chunk_is_refused_naming_the_file(store: Store,
                                                               tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, _file(tmp_path / "f", 100), "data/f")
    key = store.keys.xfer_chunk(entry.chunks[0])
    store.client.set(key, b"not the bytes")
    with pytest.raises(TransferError, match="data/f: a chunk of this file is corrupt"):
        _roundtrip(chunk_store, entry, tmp_path / "back")
    store.client.delete(key)
    with pytest.raises(TransferError, match="data/f: a chunk of this file is missing"):
        _roundtrip(chunk_store, entry, tmp_path / "back")


def test_references_free_the_manifest_and_its_own_chunks_at_none(store: Store,
                                                                 tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    shared = _upload(chunk_store, _file(tmp_path / "s", 50, seed=1), "s")
    own = _upload(chunk_store, _file(tmp_path / "o", 70, seed=2), "o")
    one = Manifest(files=(shared,))
    two = Manifest(files=(shared, own))
    first = stored.attach(store, one, jobs=2, cap_bytes=0, resend=lambda _d: None)
    second = stored.attach(store, two, jobs=1, cap_bytes=0, resend=lambda _d: None)
    assert int(store.client.get(store.keys.xfer_bytes)) == 120
    assert stored.load(store, second) == two
    stored.detach(store, second, 1)
    assert not store.client.exists(store.keys.xfer_manifest(second))
    assert not store.client.exists(store.keys.xfer_chunk(own.chunks[0]))
    assert store.client.exists(store.keys.xfer_chunk(shared.chunks[0]))
    assert int(store.client.get(store.keys.xfer_bytes)) == 50
    stored.detach(store, first, 1)
    assert store.client.exists(store.keys.xfer_manifest(first))
    stored.detach(store, first, 1)
    assert not store.client.exists(store.keys.xfer_chunk(shared.chunks[0]))
    assert int(store.client.get(store.keys.xfer_bytes)) == 0
    assert store.client.hlen(store.keys.xfer_refs) == 0
    assert store.client.hlen(store.keys.xfer_chunkrefs) == 0


def test_the_cap_refuses_naming_the_knob_and_changes_nothing(store: Store,
                                                             tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, _file(tmp_path / "f", 2000), "f")
    with pytest.raises(SubmitError, match="TRANSFER_POOL_MAX_MB"):
        stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=1000,
                      resend=lambda _d: None)
    assert store.client.hlen(store.keys.xfer_refs) == 0
    assert store.client.get(store.keys.xfer_bytes) is None


def test_a_lapsed_chunk_is_sent_again_before_the_attach(store: Store, tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    source = _file(tmp_path / "f", 300)
    entry = _upload(chunk_store, source, "f")
    store.client.delete(store.keys.xfer_chunk(entry.chunks[0]))
    resent: list[list[str]] = []

    def resend(missing: list[str]) -> None:
        resent.append(missing)
        _upload(chunk_store, source, "f")

    stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0, resend=resend)
    assert resent == [list(entry.chunks)]


def test_outputs_wait_until_settled_once(store: Store, tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, _file(tmp_path / "f", 10), "out")
    ident = stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                          resend=lambda _d: None, output_of="7.0", expires_s=1234)
    assert stored.waiting_outputs(store) == {"7.0": (ident, 1234.0)}
    assert stored.settle(store, ident, "7.0", "delivered") is True
    assert stored.settle(store, ident, "7.0", "delivered") is False
    assert stored.waiting_outputs(store) == {}
    assert not store.client.exists(store.keys.xfer_manifest(ident))


def test_a_job_leaving_the_queue_drops_its_inputs_reference(redis_client: redis.Redis,
                                                            pool_name: str,
                                                            tmp_path: Path) -> None:
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    chunk_store = ChunkStore(broker.store, HOUR_MS)
    entry = _upload(chunk_store, _file(tmp_path / "f", 10), "in")
    ident = stored.attach(broker.store, Manifest(files=(entry,)), jobs=2, cap_bytes=0,
                          resend=lambda _d: None)
    ids = broker.submit([{"Cmd": "/bin/true", "FetchworkInputManifest": ident}] * 2)
    broker.remove([ids[0]])
    assert int(redis_client.hget(broker.keys.xfer_refs, ident)) == 1
    broker.remove([ids[1]])
    assert not redis_client.exists(broker.keys.xfer_manifest(ident))
    assert not redis_client.exists(broker.keys.xfer_chunk(entry.chunks[0]))


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "", ".", "a/.."])
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(TransferError):
        check_name(name)


def test_a_manifest_packs_and_names_itself_by_its_digest() -> None:
    manifest = Manifest(dirs=("d",), files=())
    assert unpack(manifest.pack()) == manifest
    assert manifest.ident() == hashlib.sha256(manifest.pack()).hexdigest()
    assert chunks.read_exact  # the reader the starter side shares


def test_outputs_expire_once_their_time_passed(store: Store, tmp_path: Path) -> None:
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, _file(tmp_path / "f", 10, seed=9), "out")
    ident = stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                          resend=lambda _d: None, output_of="8.0", expires_s=1000)
    assert delivery.expire_due(store, now_s=999) == []
    assert delivery.expire_due(store, now_s=1000) == ["8.0"]
    assert stored.waiting_outputs(store) == {}
    assert not store.client.exists(store.keys.xfer_manifest(ident))
    assert not store.client.exists(store.keys.xfer_chunk(entry.chunks[0]))
