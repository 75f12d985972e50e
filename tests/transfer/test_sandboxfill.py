"""A big input written into the sandbox while the machine's cache fills
(transfer/sandboxfill.py), on a real Redis: under a hidden name until the whole file
is checked, renamed into place only then; a corrupt chunk, a wrong digest or size,
or a chunk gone from the pool holds the job with code 13 and leaves nothing of it in
the sandbox; as root, the file is the job's user's. The cache's chunks of such a
file are written past the page cache, and plainly where the file system refuses."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import mmap
import os
import pwd
import random
import stat
from pathlib import Path
from typing import Any

import pytest

from fetchwork.broker.store import Store
from fetchwork.config.loader import Config
from fetchwork.transfer import cache as cache_module
from fetchwork.transfer import privstate, sandbox, stored
from fetchwork.transfer.cache import ChunkCache
from fetchwork.transfer.checkedfill import fill_checked
from fetchwork.transfer.chunkget import ChunkGetter
from fetchwork.transfer.chunks import CHUNK_BYTES
from fetchwork.transfer.inputs import INPUT_MANIFEST_ATTR
from fetchwork.transfer.manifest import FileEntry, Manifest
from fetchwork.transfer.sandboxfill import Rights, SandboxFill
from tests.support.uploads import uploaded

pytestmark = pytest.mark.timeout(120)

MB = 1 << 20


def _fetch(store: Store) -> Any:
    def fetch(digest: str) -> bytes | None:
        data = store.client.get(store.keys.xfer_chunk(digest))
        return data if isinstance(data, bytes) else None
    return fetch


def _input(store: Store, pool_name: str, tmp_path: Path, files: tuple[FileEntry, ...],
           rights: Any = contextlib.nullcontext, attached: Any = lambda: None,
           owner: tuple[int, int] | None = None) -> tuple[dict[str, Any], Path]:
    """The input transfer of a job whose manifest holds `files` (`attached()` called
    once it is in the pool), with the sandbox (given to `owner`, when set) written as
    the cache fills; its answer and its sandbox."""
    ident = stored.attach(store, Manifest(files=files), jobs=1, cap_bytes=0,
                          resend=lambda _d: None)
    attached()
    folder = tmp_path / "sandbox"
    folder.mkdir()
    if owner is not None:
        os.chown(folder, *owner)
    config = Config.load(environ={"FETCHWORK_POOL": pool_name,
                                  "_FETCHWORK_TRANSFER_CACHE_DIR": str(tmp_path / "cache")})
    ad = {"ClusterId": 4, "ProcId": 0, "ShouldTransferFiles": "YES",
          INPUT_MANIFEST_ATTR: ident}
    answer = sandbox._answered("input", lambda: sandbox._transfer(
        config, store, "input", str(folder), ad, False, rights, borrow=rights))
    return answer, folder


def test_the_file_is_hidden_until_checked_whole_then_renamed(store: Store,
                                                             tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "big.bin", 3 * CHUNK_BYTES + 7, seed=1, mode=0o750)
    folder = tmp_path / "sandbox"
    folder.mkdir()
    early = SandboxFill(str(folder), contextlib.nullcontext, 13)
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    fill_checked(cache, [entry], _fetch(store), ahead=2, sandbox=early)
    hidden = list(folder.iterdir())
    assert len(hidden) == 1 and hidden[0].name.startswith(".big.bin.")
    assert hidden[0].name.endswith(".part")
    assert hidden[0].read_bytes() == (tmp_path / "big.bin").read_bytes()
    assert early.place("big.bin")
    assert [p.name for p in folder.iterdir()] == ["big.bin"]
    assert (folder / "big.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()
    assert stat.S_IMODE((folder / "big.bin").stat().st_mode) == 0o750
    assert not early.place("big.bin")  # once


def test_files_already_cached_are_written_early_too(store: Store, tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "big.bin", 2 * CHUNK_BYTES + 1, seed=2)
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    fill_checked(cache, [entry], _fetch(store))  # another job's fill
    folder = tmp_path / "sandbox"
    folder.mkdir()
    early = SandboxFill(str(folder), contextlib.nullcontext, 13)
    fill_checked(ChunkCache(tmp_path / "cache", 64 * MB), [entry],
                 lambda _d: pytest.fail("fetched again"), sandbox=early)
    assert early.place("big.bin")
    assert (folder / "big.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()


def test_a_big_input_arrives_whole_through_the_transfer(store: Store, pool_name: str,
                                                        tmp_path: Path) -> None:
    big = uploaded(store, tmp_path / "big.bin", 4 * CHUNK_BYTES + 3, seed=3)
    other = dataclasses.replace(big, name="data/copy.bin")  # the same bytes, twice
    answer, folder = _input(store, pool_name, tmp_path, (big, other))
    assert answer["ok"] is True, answer
    assert (folder / "big.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()
    assert (folder / "data" / "copy.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()
    left = [p.name for p in folder.rglob("*") if p.name.endswith(".part")]
    assert left == []


@pytest.mark.parametrize("damage", ["chunk", "sha256", "size", "missing"])
def test_a_bad_file_holds_the_job_with_nothing_in_the_sandbox(
        store: Store, pool_name: str, tmp_path: Path, damage: str) -> None:
    good = uploaded(store, tmp_path / "first.bin", 2 * CHUNK_BYTES + 9, seed=4)
    bad = uploaded(store, tmp_path / "big.bin", 5 * CHUNK_BYTES + 5, seed=5)
    key = store.keys.xfer_chunk(bad.chunks[2])
    gone = damage == "missing"
    if damage == "chunk":
        data = bytearray(store.client.get(key))
        data[77] ^= 0xFF
        store.client.set(key, bytes(data))
    elif damage == "sha256":
        bad = dataclasses.replace(bad, sha256="0" * 64)
    else:
        bad = dataclasses.replace(bad, size=bad.size - 1)
    answer, folder = _input(store, pool_name, tmp_path, (good, bad),
                            attached=lambda: gone and store.client.delete(key))
    assert answer["ok"] is False and answer["code"] == 13
    reason = {"chunk": "big.bin: a chunk of this file is corrupt in the pool",
              "missing": "big.bin: a chunk of this file is missing from the pool",
              "sha256": "big.bin: the file arrived with another size or digest",
              "size": "big.bin: the file arrived with another size or digest"}[damage]
    assert reason in answer["reason"]
    if damage == "missing":  # found when its file is written: the one before is in
        assert sorted(p.name for p in folder.iterdir()) == ["first.bin"]
    else:  # found in the fill: nothing of either file, not even a part
        assert list(folder.iterdir()) == []


def _as_nobody() -> tuple[tuple[int, int], Rights]:
    """`nobody`'s ids, and its rights taken on the calling thread (a root starter's)."""
    nobody = pwd.getpwnam("nobody")
    user = (nobody.pw_uid, nobody.pw_gid)

    def rights() -> contextlib.AbstractContextManager[None]:
        return privstate.as_user(user)
    return user, rights


@pytest.mark.skipif(os.geteuid() != 0 or not privstate.per_thread(),
                    reason="a root starter's case")
def test_as_root_the_file_is_made_and_written_as_the_jobs_user(
        store: Store, pool_name: str, tmp_path: Path, job_tmp: Path) -> None:
    user, rights = _as_nobody()
    big = uploaded(store, tmp_path / "big.bin", 2 * CHUNK_BYTES + 11, seed=6)

    answer, folder = _input(store, pool_name, job_tmp, (big,), rights, owner=user)
    assert answer["ok"] is True, answer
    info = (folder / "big.bin").stat()
    assert (info.st_uid, info.st_gid) == user
    assert (folder / "big.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()
    cached = next((job_tmp / "cache").glob("??/*"))
    assert cached.stat().st_uid == 0  # the cache stays the execute side's
    assert os.geteuid() == 0


@pytest.mark.skipif(os.geteuid() != 0 or not privstate.per_thread(),
                    reason="a root starter's case")
def test_as_root_a_sandbox_the_user_cannot_write_falls_back_to_the_plain_way(
        store: Store, pool_name: str, tmp_path: Path, job_tmp: Path) -> None:
    _user, rights = _as_nobody()
    big = uploaded(store, tmp_path / "big.bin", CHUNK_BYTES + 11, seed=7)

    answer, folder = _input(store, pool_name, job_tmp, (big,), rights)  # root's 0755 folder
    assert answer["ok"] is False and answer["code"] == 13
    assert "big.bin: Permission denied" in answer["reason"]
    assert list(folder.iterdir()) == []


# -- the cache's chunks written past the page cache ----------------------------------------

def _aligned(data: bytes) -> memoryview:
    buffer = mmap.mmap(-1, len(data))
    buffer.write(data)
    return memoryview(buffer)[:len(data)]


def test_a_chunk_written_past_the_page_cache_reads_back_whole(tmp_path: Path) -> None:
    data = random.Random(8).randbytes(3 * 4096 + 77)  # whole blocks and a partial one
    digest = hashlib.sha256(data).hexdigest()
    ChunkCache(tmp_path / "cache", 64 * MB).put_checked(digest, _aligned(data), direct=True)
    again = ChunkCache(tmp_path / "cache", 64 * MB)  # checks what it reads
    assert again.read(digest) == data
    assert stat.S_IMODE((tmp_path / "cache" / digest[:2] / digest).stat().st_mode) == 0o444


def test_a_file_system_refusing_direct_writes_gets_plain_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = fcntl.fcntl

    def refusing(fd: int, command: int, arg: int = 0) -> int:
        if command == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, command, arg)

    monkeypatch.setattr(cache_module.fcntl, "fcntl", refusing)
    cache = ChunkCache(tmp_path / "cache", 64 * MB)
    for seed in (9, 10):
        data = random.Random(seed).randbytes(2 * 4096 + 5)
        digest = hashlib.sha256(data).hexdigest()
        cache.put_checked(digest, _aligned(data), direct=True)
        assert ChunkCache(tmp_path / "cache", 64 * MB).read(digest) == data
    assert cache._direct is False  # asked once, not again


def test_a_pipelined_fill_with_the_sandbox_writes_both_whole(store: Store,
                                                             tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "big.bin", 4 * CHUNK_BYTES + 21, seed=11)
    folder = tmp_path / "sandbox"
    folder.mkdir()
    early = SandboxFill(str(folder), contextlib.nullcontext, 13)
    getter = ChunkGetter(store)
    try:
        fill_checked(ChunkCache(tmp_path / "cache", 64 * MB), [entry], _fetch(store),
                     ahead=2, fetch_into=getter.get_into, sandbox=early)
    finally:
        getter.close()
    assert early.place("big.bin")
    assert (folder / "big.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()
    again = ChunkCache(tmp_path / "cache", 64 * MB)  # each chunk read back and checked
    assert all(again.read(digest) is not None for digest in entry.chunks)
