"""Files as content-addressed chunks in the pool's Redis, streamed at both ends.

A file is read and sent one chunk (CHUNK_BYTES) at a time, each named by its
SHA-256, so no side ever holds a whole file in memory, a chunk the pool already
has is not sent again (a file shared by many jobs is stored once, a resumed
upload sends only what is missing), and every chunk and every file is checked
against its digest on arrival. Chunks go in through transfer_chunk.lua, pending
(with a TTL) until a manifest that holds them is attached.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from fetchwork.broker.store import Store, calls
from fetchwork.errors import TransferError

from .manifest import FileEntry

log = logging.getLogger(__name__)

# A few MiB: far below Redis's 512 MB string limit, large enough that a round trip
# per chunk costs little beside its bytes. 64 bytes short of 4 MiB, so that a
# chunk with Redis's own header fits its allocator's 4 MiB size class: a value of
# exactly 4 MiB takes 5 MiB of Redis's memory (MEMORY USAGE says so), this one 4.
CHUNK_BYTES = 4 * 1024 * 1024 - 64


class Cache(Protocol):
    """An execute machine's cache of chunks by digest (transfer/cache.py), read here;
    the execute side's own account fills it before the transfer."""

    def path_of(self, digest: str) -> object | None: ...


def read_exact(fd: int, size: int) -> bytes:
    """Up to `size` bytes of `fd`, fewer only at its end."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        piece = os.read(fd, left)
        if not piece:
            break
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class ChunkStore:
    """The chunks of one pool: upload a file from a descriptor, write one to another."""

    def __init__(self, store: Store, pending_ms: int, cache: Cache | None = None):
        self.store = store
        self.pending_ms = pending_ms
        self.cache = cache
        self.sent_bytes = 0
        self.received_bytes = 0

    def upload(self, fd: int, name: str, mode: int,
               progress: Callable[[int], None] | None = None) -> FileEntry:
        """Send the file open at `fd` chunk by chunk; its entry as `name`."""
        whole = hashlib.sha256()
        digests: list[str] = []
        size = 0
        client = self.store.client
        while True:
            data = read_exact(fd, CHUNK_BYTES)
            if not data and digests:
                break
            whole.update(data)
            digest = hashlib.sha256(data).hexdigest()
            # A chunk the pool has is not sent again (a pending one may still lapse
            # before its manifest is attached: the attach then names it missing).
            if not client.exists(self.store.keys.xfer_chunk(digest)) and calls.transfer_chunk(
                    self.store, digest=digest, data=data, pending_ms=self.pending_ms):
                self.sent_bytes += len(data)
            digests.append(digest)
            size += len(data)
            if progress is not None:
                progress(len(data))
            if len(data) < CHUNK_BYTES:
                break
        return FileEntry(name, mode, size, whole.hexdigest(), tuple(digests))

    def chunk(self, digest: str, name: str) -> bytes:
        """One chunk, verified: from the machine's cache, else from the pool."""
        if self.cache is not None:
            path = self.cache.path_of(digest)
            if path is not None:
                try:
                    with open(str(path), "rb") as handle:
                        cached = handle.read()
                    if hashlib.sha256(cached).hexdigest() == digest:
                        return cached
                except OSError:
                    pass
        data: Any = self.store.client.get(self.store.keys.xfer_chunk(digest))
        if not isinstance(data, bytes):
            raise TransferError(f"{name}: a chunk of this file is missing from the pool "
                                f"({digest[:12]})")
        if hashlib.sha256(data).hexdigest() != digest:
            raise TransferError(f"{name}: a chunk of this file is corrupt in the pool "
                                f"({digest[:12]})")
        self.received_bytes += len(data)
        return data

    def download(self, entry: FileEntry, fd: int) -> None:
        """Write `entry`'s bytes to `fd`, each chunk and the whole checked."""
        whole = hashlib.sha256()
        size = 0
        for digest in entry.chunks:
            data = self.chunk(digest, entry.name)
            whole.update(data)
            size += len(data)
            _write_all(fd, data)
        if size != entry.size or whole.hexdigest() != entry.sha256:
            raise TransferError(f"{entry.name}: the file arrived with another size or "
                                "digest than it was sent with")
