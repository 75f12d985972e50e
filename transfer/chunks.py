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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from redis.exceptions import NoScriptError

from fetchwork.broker.store import Store, calls
from fetchwork.errors import TransferError

from .manifest import FileEntry

log = logging.getLogger(__name__)

# A few MiB: far below Redis's 512 MB string limit, large enough that a round trip
# per chunk costs little beside its bytes. 64 bytes short of 4 MiB, so that a
# chunk with Redis's own header fits its allocator's 4 MiB size class: a value of
# exactly 4 MiB takes 5 MiB of Redis's memory (MEMORY USAGE says so), this one 4.
CHUNK_BYTES = 4 * 1024 * 1024 - 64
# Chunks sent in one round trip; two such batches are held at most while uploading.
# One: a round trip costs little beside a chunk's bytes, and the client's memory
# (each chunk is copied once more as the command is packed) stays low.
SEND_CHUNKS = 1
# A chunk this small goes through transfer_chunk.lua with its bytes at once (asking
# first would cost a round trip more than sending it); a bigger one is asked about
# first, then sent with a plain SET.
ASK_FIRST_BYTES = 256 * 1024


class Cache(Protocol):
    """An execute machine's cache of chunks by digest (transfer/cache.py), read here;
    the execute side's own account fills it before the transfer."""

    def read(self, digest: str) -> bytes | None: ...


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
        first = read_exact(fd, CHUNK_BYTES)
        if len(first) < CHUNK_BYTES:  # one chunk, as most files: its digest is the file's
            digest = hashlib.sha256(first).hexdigest()
            self._send([(digest, first)])
            if progress is not None:
                progress(len(first))
            return FileEntry(name, mode, len(first), digest, (digest,))
        return self._upload_chunks(first, fd, name, mode, progress)

    def _upload_chunks(self, data: bytes, fd: int, name: str, mode: int,
                       progress: Callable[[int], None] | None) -> FileEntry:
        """A file of several chunks: read, hashed and sent in a pipeline. The file's
        digest is computed in one helper thread, the batches are sent in another, while
        this one reads and hashes the next chunks (hashlib and the socket let go of the
        interpreter's lock for big buffers, so the work spreads over the cores). At
        most two batches of SEND_CHUNKS chunks are held."""
        whole = hashlib.sha256()
        digests: list[str] = []
        size = 0
        batch: list[tuple[str, bytes]] = []
        with ThreadPoolExecutor(2, thread_name_prefix="upload") as helpers:
            hashing: Future[None] | None = None
            sending: Future[None] | None = None
            while True:
                if hashing is not None:
                    hashing.result()
                hashing = helpers.submit(whole.update, data)
                digest = hashlib.sha256(data).hexdigest()
                batch.append((digest, data))
                digests.append(digest)
                size += len(data)
                if progress is not None:
                    progress(len(data))
                last = len(data) < CHUNK_BYTES
                if len(batch) == SEND_CHUNKS or last:
                    if sending is not None:
                        sending.result()
                    sending = helpers.submit(self._send, batch)
                    batch = []
                if last:
                    break
                data = read_exact(fd, CHUNK_BYTES)
                if not data:
                    if batch:
                        if sending is not None:
                            sending.result()
                        sending = helpers.submit(self._send, batch)
                    break
            hashing.result()
            if sending is not None:
                sending.result()
        return FileEntry(name, mode, size, whole.hexdigest(), tuple(digests))

    def _send(self, batch: list[tuple[str, bytes]]) -> None:
        """Send the chunks of `batch` the pool lacks. A small chunk goes through
        transfer_chunk.lua at once; for big ones the pool is asked first (one round trip
        for the batch), then the missing ones are sent with plain SETs in one pipeline."""
        small = [(digest, data) for digest, data in batch if len(data) <= ASK_FIRST_BYTES]
        big = [(digest, data) for digest, data in batch if len(data) > ASK_FIRST_BYTES]
        for digest, data in small:
            if calls.transfer_chunk(self.store, digest=digest, data=data,
                                    pending_ms=self.pending_ms):
                self.sent_bytes += len(data)
        if not big:
            return
        def ask(pipe: Any) -> None:
            for digest, _data in big:
                calls.ask_transfer_chunk(self.store, pipe, digest=digest,
                                         pending_ms=self.pending_ms)

        answers = self._pipelined(ask)
        missing = [(digest, data) for (digest, data), answer in zip(big, answers, strict=True)
                   if answer == -1]
        if not missing:
            return
        def put(pipe: Any) -> None:
            for digest, data in missing:
                calls.put_transfer_chunk(self.store, pipe, digest=digest, data=data,
                                         pending_ms=self.pending_ms)

        stored = self._pipelined(put)
        self.sent_bytes += sum(len(data) for (_, data), done in zip(missing, stored, strict=True)
                               if done)

    def _pipelined(self, fill: Callable[[Any], None]) -> list[Any]:
        """The replies of the commands `fill(pipe)` queues, sent in one round trip; once
        again after a NOSCRIPT (a Redis restarted since the scripts were loaded)."""
        for attempt in (1, 2):
            with self.store.client.pipeline(transaction=False) as pipe:
                fill(pipe)
                try:
                    return list(pipe.execute())
                except NoScriptError:
                    if attempt == 2:
                        raise
                    self.store.scripts.forget()
        raise AssertionError("unreachable")

    def chunk(self, digest: str, name: str) -> bytes:
        """One chunk, verified: from the machine's cache, else from the pool."""
        if self.cache is not None:
            cached = self.cache.read(digest)  # checked by the cache
            if cached is not None:
                return cached
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
        """Write `entry`'s bytes to `fd`, each chunk and the whole checked (for a file of
        several chunks, the file's digest is computed in a helper thread while the next
        chunk is read and written)."""
        if len(entry.chunks) == 1:
            data = self.chunk(entry.chunks[0], entry.name)
            _write_all(fd, data)
            self._check_file(entry, len(data), hashlib.sha256(data).hexdigest())
            return
        whole = hashlib.sha256()
        size = 0
        with ThreadPoolExecutor(1, thread_name_prefix="download") as hasher:
            hashing: Future[None] | None = None
            for digest in entry.chunks:
                data = self.chunk(digest, entry.name)
                if hashing is not None:
                    hashing.result()
                hashing = hasher.submit(whole.update, data)
                size += len(data)
                _write_all(fd, data)
            if hashing is not None:
                hashing.result()
        self._check_file(entry, size, whole.hexdigest())

    @staticmethod
    def _check_file(entry: FileEntry, size: int, digest: str) -> None:
        if size != entry.size or digest != entry.sha256:
            raise TransferError(f"{entry.name}: the file arrived with another size or "
                                "digest than it was sent with")
