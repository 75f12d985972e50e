"""Small files inside their manifest (transfer/inline.py) on a real Redis: they come
back equal with no chunk of their own, a bigger file still goes as chunks, the
inline bytes count against the pool's cap and leave its count when the manifest is
freed, an output attached in the one call is delivered and then freed, and an
inline file changed in the pool is caught before anything of it is written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgpack
import pytest

from fetchwork.broker.store import Store
from fetchwork.errors import SubmitError, TransferError
from fetchwork.transfer import delivery, inline, stored
from fetchwork.transfer.chunks import ChunkStore
from fetchwork.transfer.inputs import Source, Uploader
from fetchwork.transfer.manifest import FileEntry, Manifest, unpack

pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000


def _send(uploader: Uploader, path: Path, budget: inline.Budget) -> FileEntry:
    return uploader.send(Source(str(path), path.name), budget)


def _bytes(store: Store) -> int:
    return int(store.client.get(store.keys.xfer_bytes) or 0)


def test_a_small_file_travels_inside_its_manifest_a_bigger_one_as_chunks(
        store: Store, tmp_path: Path) -> None:
    (tmp_path / "small").write_bytes(b"s" * 100)
    (tmp_path / "big").write_bytes(b"b" * (inline.INLINE_MAX_BYTES + 1))
    uploader = Uploader(ChunkStore(store, HOUR_MS), inline=True)
    budget = inline.Budget()
    small = _send(uploader, tmp_path / "small", budget)
    big = _send(uploader, tmp_path / "big", budget)
    assert small.data == b"s" * 100 and small.chunks == ()
    assert small.sha256 == hashlib.sha256(b"s" * 100).hexdigest()
    assert big.data is None and len(big.chunks) == 1
    manifest = Manifest(files=(small, big))
    ident = stored.attach(store, manifest, jobs=1, cap_bytes=0, resend=lambda _d: None)
    assert stored.load(store, ident) == manifest
    # The inline bytes count with the chunk's, and leave with them.
    assert _bytes(store) == 100 + inline.INLINE_MAX_BYTES + 1
    stored.detach(store, ident, 1)
    assert _bytes(store) == 0
    assert store.client.hlen(store.keys.xfer_chunkrefs) == 0


def test_a_manifests_inline_bytes_are_bounded(store: Store, tmp_path: Path) -> None:
    uploader = Uploader(ChunkStore(store, HOUR_MS), inline=True)
    budget = inline.Budget()
    count = inline.INLINE_MANIFEST_MAX_BYTES // inline.INLINE_MAX_BYTES + 2
    entries = []
    for number in range(count):
        path = tmp_path / f"f{number}"
        path.write_bytes(bytes([number]) * inline.INLINE_MAX_BYTES)
        entries.append(_send(uploader, path, budget))
    assert Manifest(files=tuple(entries)).inline_bytes == inline.INLINE_MANIFEST_MAX_BYTES
    assert [entry.data is None for entry in entries][-2:] == [True, True]


def test_a_persons_uploader_sends_chunks_only(store: Store, tmp_path: Path) -> None:
    (tmp_path / "small").write_bytes(b"x" * 10)
    entry = _send(Uploader(ChunkStore(store, HOUR_MS)), tmp_path / "small", inline.Budget())
    assert entry.data is None and len(entry.chunks) == 1
    # A manifest of chunks only keeps the first packed form (a person's leader reads it).
    assert msgpack.unpackb(Manifest(files=(entry,)).pack())["v"] == 1


def test_the_cap_counts_inline_bytes(store: Store) -> None:
    data = b"z" * 3000
    entry = FileEntry("f", 0o644, len(data), hashlib.sha256(data).hexdigest(), (), data)
    with pytest.raises(SubmitError, match="TRANSFER_POOL_MAX_MB"):
        stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=2000,
                      resend=lambda _d: None)
    assert store.client.hlen(store.keys.xfer_refs) == 0
    assert _bytes(store) == 0


def test_an_output_attached_in_one_call_is_counted_delivered_and_freed(
        store: Store, tmp_path: Path) -> None:
    data = b"result\n"
    entry = FileEntry("out.txt", 0o640, len(data), hashlib.sha256(data).hexdigest(), (), data)
    calls: list[object] = []
    ident = stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                          resend=calls.append, output_of="7.0", expires_s=4_000_000_000)
    assert calls == []  # nothing to send apart from the manifest
    assert int(store.client.hget(store.keys.xfer_refs, ident)) == 1
    assert _bytes(store) == len(data)
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    done = delivery.deliver(store, "7.0", {delivery.OUTPUT_MANIFEST_ATTR: ident,
                                           "Iwd": str(iwd)})
    assert done is not None and done.files == 1
    assert (iwd / "out.txt").read_bytes() == data
    assert (iwd / "out.txt").stat().st_mode & 0o777 == 0o640
    assert not store.client.exists(store.keys.xfer_manifest(ident))
    assert store.client.hlen(store.keys.xfer_refs) == 0
    assert _bytes(store) == 0


def _corrupt(store: Store, ident: str, data: bytes) -> None:
    """Rewrite manifest `ident` in the pool with another inline file's bytes."""
    key = store.keys.xfer_manifest(ident)
    raw = msgpack.unpackb(store.client.hget(key, "data"), raw=False)
    raw["files"][0][5] = data
    store.client.hset(key, "data", msgpack.packb(raw, use_bin_type=True))


def test_an_inline_file_changed_in_the_pool_is_caught(store: Store, tmp_path: Path) -> None:
    data = b"the right bytes"
    entry = FileEntry("in.txt", 0o644, len(data), hashlib.sha256(data).hexdigest(), (), data)
    ident = stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                          resend=lambda _d: None)
    _corrupt(store, ident, b"the wrong bytes")
    # The manifest no longer matches its name: refused before any file is written.
    with pytest.raises(TransferError, match="does not match its digest"):
        stored.load(store, ident)


def test_an_inline_file_that_does_not_match_its_digest_is_not_written(tmp_path: Path) -> None:
    data = b"sent"
    entry = FileEntry("in.txt", 0o644, len(data), hashlib.sha256(b"other").hexdigest(), (),
                      data)
    # Even inside a manifest that matches its own name, the file's digest is checked.
    again = unpack(Manifest(files=(entry,)).pack()).files[0]
    with pytest.raises(TransferError, match="in.txt") as caught:
        inline.fill(again, 12)
    assert caught.value.code == 12


def test_a_file_grown_past_the_limit_since_its_size_was_read_goes_as_chunks(
        tmp_path: Path) -> None:
    path = tmp_path / "grows"
    path.write_bytes(b"g" * (inline.INLINE_MAX_BYTES + 10))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert inline.Budget().read(fd, 10, "grows", 0o644) is None
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    finally:
        os.close(fd)
