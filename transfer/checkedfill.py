"""Fill the machine's chunk cache file by file, each chunk and each file checked in
the one pass that brings its bytes.

An input arrives in two steps: the execute side's own account fills the cache
(the job's user may read it, never write it), then the job's user writes the
sandbox from it. Each chunk's SHA-256 is checked as it arrives from the pool,
and the file's SHA-256 is computed over the same bytes at the same time, in a
helper thread (hashlib lets go of the interpreter's lock, so the two passes
run on two cores while a third thread fetches the chunks ahead). A file of one
chunk has its chunk's digest: it is hashed once. A chunk checked is written into
the cache by a fourth thread while the next one is checked (writing a few MiB
into a new file costs as much CPU as hashing them). A file whose bytes do not
make its digest fails here, before anything of it reaches a sandbox under its
name. Every file checked whole is noted in the cache (`ChunkCache.checked_file`).

Given a `SandboxFill`, a file of several chunks is also written into the job's
sandbox by a fifth thread, from the same buffers, each chunk once checked, under
a hidden name its caller renames once the whole file is checked
(transfer/sandboxfill.py): the sandbox's write overlaps the fill instead of
following it. Nothing then reads those chunks back from the cache soon, so their
cache files are written past the page cache (`ChunkCache.put_checked` with
`direct`), which spares most of the CPU a write into new pages costs. Any other
file's sandbox copy is made in the kernel afterwards (`ChunkCache.copy_file`),
with no pass of the bytes through the process.

A chunk already cached is read back and checked (a damaged one is removed and
fetched again). A chunk the pool lacks leaves its file unchecked here: the
sandbox's writer reports it, naming the file, when it needs that chunk.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import mmap
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any

from fetchwork.errors import TransferError

from .cache import ChunkCache
from .chunks import CHUNK_BYTES
from .manifest import FileEntry
from .sandboxfill import SandboxFill
from .stagetimes import StageTimes

log = logging.getLogger(__name__)

Fetch = Callable[[str], bytes | None]
# A chunk's GET into a buffer: the part of it the chunk fills; None when the pool lacks it.
FetchInto = Callable[[str, bytearray | mmap.mmap], memoryview | None]
Data = bytes | memoryview
# Chunks checked and handed to the cache's writer thread, not yet written, at most.
WRITES_AHEAD = 1


def _wait(writes: deque[Future[None]], left: int) -> None:
    """Until at most `left` of the cache's writes are pending (their errors raised)."""
    while len(writes) > left:
        writes.popleft().result()


class _Buffers:
    """Chunk-sized buffers the chunks fetched ahead are read into, each used again
    once every thread that reads its chunk (the file's digest, the cache's write) is
    done with it."""

    def __init__(self, count: int, size: int):
        # Made as they are first needed, up to `count`.
        self._buffers: list[mmap.mmap] = []
        self._count = count
        self._size = size
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._holders: dict[int, int] = {}
        self._slot_of: dict[int, int] = {}  # id of a view handed out -> its buffer
        self._lock = threading.Lock()

    def fetching(self, fetch_into: FetchInto) -> Callable[[str], Data | None]:
        """`fetch_into` as a fetch that reads into the next free buffer."""
        def fetch(digest: str) -> Data | None:
            slot = self._take()
            try:
                view = fetch_into(digest, self._buffers[slot])
            except BaseException:
                self._free.put(slot)
                raise
            if view is None:
                self._free.put(slot)
                return None
            with self._lock:
                self._slot_of[id(view)] = slot
            return view
        return fetch

    def _take(self) -> int:
        """A free buffer, made when none is free and fewer than `count` exist."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if len(self._buffers) < self._count:
                # Anonymous memory of its own: page-aligned, as writes past the
                # page cache need (ChunkCache.put_checked).
                self._buffers.append(mmap.mmap(-1, self._size))
                return len(self._buffers) - 1
        return self._free.get()

    def hold(self, data: Data, futures: list[Future[None]]) -> None:
        """`data`'s buffer is free again once all of `futures` are done (at once when
        `data` is not one of these buffers' views)."""
        with self._lock:
            slot = self._slot_of.pop(id(data), None)
            if slot is None:
                return
            self._holders[slot] = len(futures)
        if not futures:
            self._free.put(slot)
        for future in futures:
            future.add_done_callback(functools.partial(self._release, slot))

    def _release(self, slot: int, _done: object = None) -> None:
        with self._lock:
            self._holders[slot] -= 1
            if self._holders[slot]:
                return
        self._free.put(slot)


class _Ahead:
    """The chunks to fetch from the pool, in their order of first use, fetched up to
    `ahead` + 1 at a time by one helper thread."""

    def __init__(self, wanted: list[str], fetch: Callable[[str], Data | None], ahead: int,
                 fetcher: ThreadPoolExecutor):
        self._fetch = fetch
        self._fetcher = fetcher
        self._wanted = iter(wanted)
        self._queued: deque[tuple[str, Future[Data | None]]] = deque(
            (digest, fetcher.submit(fetch, digest)) for digest in islice(self._wanted,
                                                                         ahead + 1))

    def take(self, digest: str) -> tuple[bool, Data | None]:
        """(True, its bytes or None) when `digest` is the next chunk fetched ahead;
        (False, None) when it is not one of them (cached before the fill began)."""
        if not self._queued or self._queued[0][0] != digest:
            return False, None
        _, future = self._queued.popleft()
        data = future.result()
        following = next(self._wanted, None)
        if following is not None:
            self._queued.append((following, self._fetcher.submit(self._fetch, following)))
        return True, data


def fill_checked(cache: ChunkCache, files: Sequence[FileEntry], fetch: Fetch,
                 ahead: int = 2, fetch_into: FetchInto | None = None,
                 sandbox: SandboxFill | None = None) -> int:
    """Put the chunks of `files` the cache lacks into it, fetched by `fetch(digest)`
    (None: the pool lacks it), each chunk and each file checked in one pass; the bytes
    fetched. With `sandbox`, each file of several chunks is also written into the
    job's sandbox under a hidden name as its chunks are checked, by a thread of its
    own, and marked checked once the whole file is (transfer/sandboxfill.py; its
    caller renames it into place). TransferError naming the file when a chunk from the
    pool is corrupt or a file's bytes do not make its digest; CacheError or OSError
    when the cache cannot be written (its caller then reads from the pool)."""
    wanted = [digest for digest in dict.fromkeys(d for entry in files for d in entry.chunks)
              if digest not in cache]
    fetched = 0
    stages = StageTimes()
    # With `fetch_into`, chunks from the pool are read into buffers used again: one per
    # chunk fetched ahead, the one being checked, and the one before it (its file
    # digest or its write may not be done).
    # (One more with `sandbox`: its write holds a chunk too.)
    buffers = (_Buffers(ahead + (4 if sandbox is not None else 3), CHUNK_BYTES)
               if fetch_into is not None else None)
    fetch_ahead: Callable[[str], Data | None] = (
        fetch if buffers is None or fetch_into is None else buffers.fetching(fetch_into))

    def timed_fetch(digest: str) -> Data | None:
        with stages.stage("GET"):
            return fetch_ahead(digest)

    def file_digest(whole: Any, data: Data) -> None:
        with stages.stage("file digest"):
            whole.update(data)

    def cache_write(digest: str, data: Data, direct: bool) -> None:
        with stages.stage("cache write"):
            cache.put_checked(digest, data, direct)

    def sandbox_write(name: str, offset: int, data: Data) -> None:
        assert sandbox is not None
        with stages.stage("sandbox write"):
            sandbox.write(name, offset, data)

    with ThreadPoolExecutor(1, thread_name_prefix="cache-fill") as fetcher, \
            ThreadPoolExecutor(1, thread_name_prefix="file-digest") as hasher, \
            ThreadPoolExecutor(1, thread_name_prefix="cache-write") as writer, \
            ThreadPoolExecutor(1, thread_name_prefix="sandbox-write") as placer:
        pending = _Ahead(wanted, timed_fetch, ahead, fetcher)
        writes: deque[Future[None]] = deque()
        placing: deque[Future[None]] = deque()
        for entry in files:
            stages = StageTimes() if len(entry.chunks) > 1 else stages
            early = (sandbox is not None and len(entry.chunks) > 1
                     and sandbox.start(entry))
            whole = hashlib.sha256() if len(entry.chunks) != 1 else None
            hashing: Future[None] | None = None
            size = 0
            complete = True
            for digest in entry.chunks:
                try:
                    ahead_taken, data = pending.take(digest)
                except TransferError as exc:
                    raise TransferError(f"{entry.name}: {exc}") from exc
                if not ahead_taken:
                    _wait(writes, 0)  # the chunk may be one being written
                    with stages.stage("cache read"):
                        data = cache.read(digest)  # checked, unless this object did already
                    if data is None:  # damaged (removed), or evicted since: fetch it again
                        ahead_taken, data = True, fetch(digest)
                if data is None:  # the rest is still walked: the fetches ahead stay in turn
                    complete = False
                    continue
                if hashing is not None:
                    hashing.result()
                holders: list[Future[None]] = []
                if whole is not None:  # the file's digest, beside the chunk's
                    hashing = hasher.submit(file_digest, whole, data)
                    holders.append(hashing)
                if ahead_taken:
                    with stages.stage("chunk digest"):
                        actual = hashlib.sha256(data).hexdigest()
                    if actual != digest:
                        raise TransferError(f"{entry.name}: a chunk of this file is corrupt "
                                            f"in the pool ({digest[:12]})")
                    # Checked: written by the writer while the next chunk is checked.
                    _wait(writes, WRITES_AHEAD - 1)
                    # A file written into the sandbox from these buffers leaves its
                    # chunks unread here: their cache files skip the page cache.
                    writes.append(writer.submit(cache_write, digest, data,
                                                bool(early) and buffers is not None
                                                and isinstance(data, memoryview)))
                    holders.append(writes[-1])
                    fetched += len(data)
                if early:  # checked: into the job's file, at its place
                    assert sandbox is not None
                    _wait(placing, WRITES_AHEAD)
                    placing.append(placer.submit(sandbox_write, entry.name, size, data))
                    holders.append(placing[-1])
                if buffers is not None:
                    buffers.hold(data, holders)
                size += len(data)
                del data
            if hashing is not None:
                hashing.result()
            _wait(writes, 0)
            _wait(placing, 0)
            if not complete:
                if early:
                    assert sandbox is not None
                    sandbox.drop(entry.name)  # written later, its missing chunk reported
                continue
            digest_of_file = whole.hexdigest() if whole is not None else entry.chunks[0]
            if size != entry.size or digest_of_file != entry.sha256:
                raise TransferError(f"{entry.name}: the file arrived with another size or "
                                    "digest than it was sent with")
            cache.checked_file(entry.sha256, entry.size, entry.chunks)
            if early:
                assert sandbox is not None
                sandbox.checked(entry.name)
            if len(entry.chunks) > 1:
                log.info("%s: into the machine's cache, checked: %s", entry.name,
                         stages.summary(entry.size))
    return fetched
