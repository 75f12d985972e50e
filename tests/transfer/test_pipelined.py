"""The pipelined paths of a big file on a real Redis: the upload's window of SETs
(transfer/sendwindow.py) surviving a connection killed or a script lost mid-window,
and the download's GETs into reused buffers (transfer/chunkget.py), with a corrupt
chunk in the middle caught before anything reaches the sandbox."""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fetchwork.broker.store import Store
from fetchwork.config.loader import Config
from fetchwork.errors import TransferError
from fetchwork.transfer import sandbox, sendwindow, stored
from fetchwork.transfer.cache import ChunkCache
from fetchwork.transfer.checkedfill import fill_checked
from fetchwork.transfer.chunkget import ChunkGetter
from fetchwork.transfer.chunks import CHUNK_BYTES, ChunkStore
from fetchwork.transfer.inputs import INPUT_MANIFEST_ATTR
from fetchwork.transfer.manifest import FileEntry, Manifest

pytestmark = pytest.mark.timeout(120)

HOUR_MS = 3_600_000
MB = 1 << 20
UPLOADER = "fw-test-uploader"


@pytest.fixture
def named_store(redis_url: str, pool_name: str) -> Iterator[Store]:
    """A store whose connections carry a name, so a test can kill exactly them."""
    client = redis.Redis.from_url(redis_url, client_name=UPLOADER)
    yield Store(client, pool_name, 1000)
    client.close()


def _write(path: Path, size: int, seed: int) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


def _upload(chunk_store: ChunkStore, path: Path, **kwargs: object) -> FileEntry:
    fd = os.open(path, os.O_RDONLY)
    try:
        return chunk_store.upload(fd, path.name, 0o644, **kwargs)  # type: ignore[arg-type]
    finally:
        os.close(fd)


def _copied(cache: ChunkCache, entry: FileEntry, target: Path) -> bytes:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        assert cache.copy_file(entry.sha256, entry.size, entry.chunks, fd)
    finally:
        os.close(fd)
    return target.read_bytes()


def _kill_uploader(client: redis.Redis) -> int:
    killed = 0
    for entry in client.client_list():
        if entry.get("name") == UPLOADER:
            killed += int(client.client_kill_filter(_id=entry["id"]))
    return killed


# -- the upload's window ------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["connection killed", "scripts flushed"])
def test_an_upload_resumes_when_its_window_is_cut(named_store: Store, redis_client: redis.Redis,
                                                  tmp_path: Path, fault: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = _write(tmp_path / "big.bin", 6 * CHUNK_BYTES + 11, seed=1)
    done = {"faults": 0, "chunks": 0}

    def progress(_count: int) -> None:  # on the reading thread
        done["chunks"] += 1

    read_one = sendwindow.SendWindow._read_one

    def cut_then_read(window: sendwindow.SendWindow) -> object:
        # The fault comes as the sender waits for a chunk's reply, chunks still to send.
        if not done["faults"] and done["chunks"] >= 3 and window._expected[0][0] == "set":
            if fault == "connection killed":
                done["faults"] = _kill_uploader(redis_client)
            else:
                redis_client.script_flush()
                done["faults"] = 1
        return read_one(window)

    monkeypatch.setattr(sendwindow.SendWindow, "_read_one", cut_then_read)
    chunk_store = ChunkStore(named_store, HOUR_MS)
    entry = _upload(chunk_store, tmp_path / "big.bin", progress=progress)
    assert done["faults"] == 1
    assert chunk_store.resends == 1
    assert len(entry.chunks) == 7 and entry.size == len(data)
    for digest in entry.chunks:  # every chunk is in the pool, pending
        key = named_store.keys.xfer_chunk(digest)
        assert redis_client.exists(key) and redis_client.pttl(key) > 0
    back = ChunkStore(named_store, 0)
    fd = os.open(tmp_path / "back", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        back.download(entry, fd)
    finally:
        os.close(fd)
    assert (tmp_path / "back").read_bytes() == data


def test_an_upload_sends_only_what_the_pool_lacks(store: Store, tmp_path: Path) -> None:
    _write(tmp_path / "big.bin", 5 * CHUNK_BYTES, seed=2)
    first = ChunkStore(store, HOUR_MS)
    entry = _upload(first, tmp_path / "big.bin")
    assert first.sent_bytes == entry.size
    store.client.delete(store.keys.xfer_chunk(entry.chunks[3]))  # lapsed
    again = ChunkStore(store, HOUR_MS)
    assert _upload(again, tmp_path / "big.bin") == entry
    assert again.sent_bytes == CHUNK_BYTES


def test_a_file_of_one_repeated_chunk_goes_up_once(store: Store, tmp_path: Path) -> None:
    (tmp_path / "zeros").write_bytes(bytes(4 * CHUNK_BYTES))
    chunk_store = ChunkStore(store, HOUR_MS)
    entry = _upload(chunk_store, tmp_path / "zeros")
    assert len(set(entry.chunks)) == 1 and len(entry.chunks) == 4
    assert chunk_store.sent_bytes == CHUNK_BYTES


def test_an_upload_whose_faults_pass_the_retries_fails_leaving_pending_chunks(
        named_store: Store, redis_client: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "big.bin", 6 * CHUNK_BYTES, seed=3)
    monkeypatch.setattr(sendwindow, "RETRIES", 0)
    killed = {"count": 0, "chunks": 0}

    def progress(_count: int) -> None:  # on the reading thread
        killed["chunks"] += 1

    read_one = sendwindow.SendWindow._read_one

    def cut_then_read(window: sendwindow.SendWindow) -> object:
        # On the sending thread, as it waits for a chunk's reply with chunks still to
        # send: a kill from the reading thread could come before the sender's
        # connection was made (the reader runs ahead on a loaded machine), or after
        # its last reply.
        if not killed["count"] and killed["chunks"] >= 3 and window._expected[0][0] == "set":
            killed["count"] = _kill_uploader(redis_client)
        return read_one(window)

    monkeypatch.setattr(sendwindow.SendWindow, "_read_one", cut_then_read)
    with pytest.raises(redis.ConnectionError):
        _upload(ChunkStore(named_store, HOUR_MS), tmp_path / "big.bin", progress=progress)
    assert killed["count"] == 1
    keys = list(redis_client.scan_iter(named_store.keys.xfer_chunk("*")))
    assert all(redis_client.pttl(key) > 0 for key in keys)  # they lapse unattached


def test_an_upload_cut_as_it_reads_its_last_replies_fails_rather_than_hangs(
        named_store: Store, redis_client: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection cut after the reader's last chunk, as the sender reads the window's
    last replies: the upload fails with the connection's error, as one cut mid-window
    does (the sender had already taken the reader's end mark; it waited for another)."""
    _write(tmp_path / "big.bin", 4 * CHUNK_BYTES, seed=4)
    monkeypatch.setattr(sendwindow, "RETRIES", 0)
    killed = {"count": 0}
    read_one = sendwindow.SendWindow._read_one

    def cut_then_read(window: sendwindow.SendWindow) -> object:
        # Only `finish` reads with no chunk asked about and not yet decided.
        if not killed["count"] and window._asked is None:
            killed["count"] = _kill_uploader(redis_client)
        return read_one(window)

    monkeypatch.setattr(sendwindow.SendWindow, "_read_one", cut_then_read)
    ended: dict[str, BaseException | None] = {}

    def upload() -> None:
        try:
            _upload(ChunkStore(named_store, HOUR_MS), tmp_path / "big.bin")
            ended["error"] = None
        except BaseException as exc:  # noqa: BLE001 - looked at below
            ended["error"] = exc

    thread = threading.Thread(target=upload, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the upload still waits, 60 s after its connection was cut"
    assert killed["count"] == 1
    assert isinstance(ended["error"], redis.ConnectionError), ended


# -- the download's GETs into buffers -----------------------------------------------------

def test_a_pipelined_fill_reads_every_chunk_into_its_buffers(store: Store,
                                                              tmp_path: Path) -> None:
    big_data = _write(tmp_path / "big", 5 * CHUNK_BYTES + 3, seed=4)
    _write(tmp_path / "small", 900, seed=5)
    big = _upload(ChunkStore(store, HOUR_MS), tmp_path / "big")
    small = _upload(ChunkStore(store, HOUR_MS), tmp_path / "small")
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    asked: list[str] = []

    def fetch(digest: str) -> bytes | None:  # the fallback: not used
        asked.append(digest)
        return None

    getter = ChunkGetter(store)
    try:
        fetched = fill_checked(cache, [big, small, big], fetch, ahead=2,
                               fetch_into=getter.get_into)
    finally:
        getter.close()
    assert fetched == big.size + small.size and asked == []
    assert _copied(cache, big, tmp_path / "big.back") == big_data
    assert _copied(cache, small, tmp_path / "small.back") == (tmp_path / "small").read_bytes()


def test_a_chunk_get_into_a_buffer_says_missing_and_refuses_a_long_value(
        store: Store, tmp_path: Path) -> None:
    getter = ChunkGetter(store)
    buffer = bytearray(CHUNK_BYTES)
    try:
        assert getter.get_into("ab" * 32, buffer) is None
        store.client.set(store.keys.xfer_chunk("cd" * 32), b"x" * (CHUNK_BYTES + 1))
        with pytest.raises(TransferError, match="longer than a chunk"):
            getter.get_into("cd" * 32, buffer)
        store.client.set(store.keys.xfer_chunk("ef" * 32), b"y" * 10)
        view = getter.get_into("ef" * 32, buffer)  # on a new connection
        assert view is not None and bytes(view) == b"y" * 10
        store.client.set(store.keys.xfer_chunk("ef" * 32), b"")
        view = getter.get_into("ef" * 32, buffer)
        assert view is not None and bytes(view) == b""
    finally:
        getter.close()


def test_a_corrupt_chunk_mid_download_holds_the_job_before_the_sandbox(
        store: Store, pool_name: str, tmp_path: Path) -> None:
    _write(tmp_path / "big.bin", 5 * CHUNK_BYTES + 5, seed=6)
    entry = _upload(ChunkStore(store, HOUR_MS), tmp_path / "big.bin")
    ident = stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                          resend=lambda _d: None)
    key = store.keys.xfer_chunk(entry.chunks[2])
    damaged = bytearray(store.client.get(key))
    damaged[1000] ^= 0xFF
    store.client.set(key, bytes(damaged))
    folder = tmp_path / "sandbox"
    folder.mkdir()
    cache_dir = tmp_path / "cache"
    config = Config.load(environ={"FETCHWORK_POOL": pool_name,
                                  "_FETCHWORK_TRANSFER_CACHE_DIR": str(cache_dir)})
    ad = {"ClusterId": 3, "ProcId": 0, "ShouldTransferFiles": "YES",
          INPUT_MANIFEST_ATTR: ident}
    answer = sandbox._answered("input", lambda: sandbox._transfer(
        config, store, "input", str(folder), ad, False, contextlib.nullcontext))
    assert answer["ok"] is False and answer["code"] == 13
    assert "big.bin: a chunk of this file is corrupt in the pool" in answer["reason"]
    assert list(folder.iterdir()) == []  # nothing of it, not even a part
    cache = ChunkCache(cache_dir, 64 * MB)
    assert entry.chunks[1] in cache and entry.chunks[2] not in cache
