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
make its digest fails here, before anything of it reaches a sandbox. Every
file checked whole is noted in the cache (`ChunkCache.checked_file`), and the
sandbox's copy is then made in the kernel (`ChunkCache.copy_file`), with no
pass of the bytes through the process.

A chunk already cached is read back and checked (a damaged one is removed and
fetched again). A chunk the pool lacks leaves its file unchecked here: the
sandbox's writer reports it, naming the file, when it needs that chunk.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any

from fetchwork.errors import TransferError

from .cache import ChunkCache
from .manifest import FileEntry
from .stagetimes import StageTimes

log = logging.getLogger(__name__)

Fetch = Callable[[str], bytes | None]
# Chunks checked and handed to the cache's writer thread, not yet written, at most.
WRITES_AHEAD = 1


def _wait(writes: deque[Future[None]], left: int) -> None:
    """Until at most `left` of the cache's writes are pending (their errors raised)."""
    while len(writes) > left:
        writes.popleft().result()


class _Ahead:
    """The chunks to fetch from the pool, in their order of first use, fetched up to
    `ahead` + 1 at a time by one helper thread."""

    def __init__(self, wanted: list[str], fetch: Fetch, ahead: int,
                 fetcher: ThreadPoolExecutor):
        self._fetch = fetch
        self._fetcher = fetcher
        self._wanted = iter(wanted)
        self._queued: deque[tuple[str, Future[bytes | None]]] = deque(
            (digest, fetcher.submit(fetch, digest)) for digest in islice(self._wanted,
                                                                         ahead + 1))

    def take(self, digest: str) -> tuple[bool, bytes | None]:
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
                 ahead: int = 2) -> int:
    """Put the chunks of `files` the cache lacks into it, fetched by `fetch(digest)`
    (None: the pool lacks it), each chunk and each file checked in one pass; the bytes
    fetched. TransferError naming the file when a chunk from the pool is corrupt or a
    file's bytes do not make its digest; CacheError or OSError when the cache cannot be
    written (its caller then reads from the pool)."""
    wanted = [digest for digest in dict.fromkeys(d for entry in files for d in entry.chunks)
              if digest not in cache]
    fetched = 0
    stages = StageTimes()

    def timed_fetch(digest: str) -> bytes | None:
        with stages.stage("GET"):
            return fetch(digest)

    def file_digest(whole: Any, data: bytes) -> None:
        with stages.stage("file digest"):
            whole.update(data)

    def cache_write(digest: str, data: bytes) -> None:
        with stages.stage("cache write"):
            cache.put_checked(digest, data)

    with ThreadPoolExecutor(1, thread_name_prefix="cache-fill") as fetcher, \
            ThreadPoolExecutor(1, thread_name_prefix="file-digest") as hasher, \
            ThreadPoolExecutor(1, thread_name_prefix="cache-write") as writer:
        pending = _Ahead(wanted, timed_fetch, ahead, fetcher)
        writes: deque[Future[None]] = deque()
        for entry in files:
            stages = StageTimes() if len(entry.chunks) > 1 else stages
            whole = hashlib.sha256() if len(entry.chunks) != 1 else None
            hashing: Future[None] | None = None
            size = 0
            complete = True
            for digest in entry.chunks:
                ahead_taken, data = pending.take(digest)
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
                if whole is not None:  # the file's digest, beside the chunk's
                    hashing = hasher.submit(file_digest, whole, data)
                if ahead_taken:
                    with stages.stage("chunk digest"):
                        actual = hashlib.sha256(data).hexdigest()
                    if actual != digest:
                        raise TransferError(f"{entry.name}: a chunk of this file is corrupt "
                                            f"in the pool ({digest[:12]})")
                    # Checked: written by the writer while the next chunk is checked.
                    _wait(writes, WRITES_AHEAD - 1)
                    writes.append(writer.submit(cache_write, digest, data))
                    fetched += len(data)
                size += len(data)
                del data
            if hashing is not None:
                hashing.result()
            _wait(writes, 0)
            if not complete:
                continue
            digest_of_file = whole.hexdigest() if whole is not None else entry.chunks[0]
            if size != entry.size or digest_of_file != entry.sha256:
                raise TransferError(f"{entry.name}: the file arrived with another size or "
                                    "digest than it was sent with")
            cache.checked_file(entry.sha256, entry.size, entry.chunks)
            if len(entry.chunks) > 1:
                log.info("%s: into the machine's cache, checked: %s", entry.name,
                         stages.summary(entry.size))
    return fetched
