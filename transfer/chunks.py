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
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from redis.connection import PythonRespSerializer
from redis.exceptions import NoScriptError

from fetchwork.broker.store import Store, calls
from fetchwork.errors import TransferError

from .filecopy import read_into
from .manifest import FileEntry
from .sendwindow import WINDOW, Chunk, SendWindow
from .stagetimes import StageTimes

log = logging.getLogger(__name__)

# Two MiB: far below Redis's 512 MB string limit, large enough that a round trip
# per chunk costs little beside its bytes (a file's chunks are streamed, their
# replies read later), small enough that Redis's work on a chunk stays cheap.
# Redis copies each SET's value twice more on its way to its append-only file,
# into buffers it frees once the entry is written; the bigger those buffers, the
# more of them its allocator gives back to the kernel, and Redis's CPU goes into
# new zeroed pages (page faults a 4 KiB page of an uploaded file: 2.9 at 4 MiB,
# 2.2 at 2 MiB, 1.0 at 1 MiB, where 1 is the stored value's own). Against 4 MiB,
# 2 MiB cut Redis's CPU for a 1 GiB input (upload and download) by about a
# third and the whole transfer's (submit client, starter, Redis) by a sixth;
# 1 MiB cut Redis's further but cost the execute side more than it saved
# (twice the chunks of 2 MiB to fetch, check and cache). 64 bytes short of
# 2 MiB, so that a chunk with Redis's own header fits its allocator's 2 MiB size
# class: a value of exactly 2 MiB takes 2.5 MiB of Redis's memory (MEMORY USAGE
# says so), this one 2.
CHUNK_BYTES = 2 * 1024 * 1024 - 64
# Arguments longer than this are handed to the socket apart from the command's
# header, as they are (see ChunkStore._put).
_PACK_CUTOFF_BYTES = 6000
# A chunk this small goes through transfer_chunk.lua with its bytes at once (asking
# first would cost a round trip more than sending it); a bigger one is asked about
# first, then sent with a plain SET.
ASK_FIRST_BYTES = 256 * 1024
# Small chunks held back for one round trip (ChunkStore.hold_small) are sent once
# they pass this many bytes.
HELD_MAX_BYTES = 4 * 1024 * 1024
# The buffers of an upload: one being read, one asked about, WINDOW SETs unanswered,
# and one for the reader to go on while the oldest is answered.
UPLOAD_BUFFERS = WINDOW + 3


class Cache(Protocol):
    """An execute machine's cache of chunks by digest (transfer/cache.py), read here;
    the execute side's own account fills it before the transfer."""

    def read(self, digest: str) -> bytes | None: ...

    def read_into(self, digest: str, buffer: bytearray) -> memoryview | None: ...

    def copy_file(self, sha256: str, size: int, chunks: tuple[str, ...], fd: int) -> bool: ...


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


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class ChunkStore:
    """The chunks of one pool: upload a file from a descriptor, write one to another."""

    def __init__(self, store: Store, pending_ms: int, cache: Cache | None = None,
                 hold_small: bool = False):
        self.store = store
        # Small chunks kept back until `flush` sends them in one round trip (a
        # sandbox's small outputs), instead of one round trip each.
        self.hold_small = hold_small
        self._held: list[tuple[str, bytes]] = []
        self.pending_ms = pending_ms
        self.cache = cache
        self.sent_bytes = 0
        self.received_bytes = 0
        # Faults of the connection an upload survived by sending its unanswered
        # chunks again (transfer/sendwindow.py).
        self.resends = 0
        # The chunk buffers a file of several chunks is read into in turn, made at its
        # first such file (a small file needs none: bytes of its own size): two for a
        # download, UPLOAD_BUFFERS for an upload.
        self._buffers: list[bytearray] = []

    def _chunk_buffers(self, count: int = 2) -> list[bytearray]:
        while len(self._buffers) < count:
            self._buffers.append(bytearray(CHUNK_BYTES))
        return self._buffers

    def upload(self, fd: int, name: str, mode: int,
               progress: Callable[[int], None] | None = None) -> FileEntry:
        """Send the file open at `fd` chunk by chunk; its entry as `name`."""
        first: bytes | memoryview
        if os.fstat(fd).st_size < CHUNK_BYTES:  # most files: read in bytes of their size
            first = read_exact(fd, CHUNK_BYTES)
        else:
            buffer = self._chunk_buffers()[0]
            first = memoryview(buffer)[:read_into(fd, buffer)]
        if len(first) < CHUNK_BYTES:  # one chunk: its digest is the file's
            digest = hashlib.sha256(first).hexdigest()
            self._send([(digest, first)])
            if progress is not None:
                progress(len(first))
            return FileEntry(name, mode, len(first), digest, (digest,))
        assert isinstance(first, memoryview)  # read into buffer 0
        return self._upload_chunks(first, fd, name, mode, progress)

    def _upload_chunks(self, first: memoryview, fd: int, name: str, mode: int,
                       progress: Callable[[int], None] | None) -> FileEntry:
        """A file of several chunks: read, hashed and sent in a pipeline of three
        threads. This one reads each chunk into a free buffer and computes its
        digest; one helper computes the file's digest over the same buffers, in
        order; another sends them (transfer/sendwindow.py: each chunk asked about
        before the one before it is sent, WINDOW SETs in flight). hashlib and the
        socket let go of the interpreter's lock for big buffers, so the two SHA-256
        passes and the sending spread over the cores. No chunk is copied on its way
        to the socket, and none is read twice: a buffer is read into again once the
        file's digest has passed over it and Redis has answered its SET."""
        stages = StageTimes()
        buffers = self._chunk_buffers(UPLOAD_BUFFERS)
        free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(1, len(buffers)):  # the first chunk is in buffer 0
            free.put(slot)
        holders: dict[int, int] = {}
        lock = threading.Lock()

        def release(chunk: Chunk) -> None:
            with lock:
                holders[chunk.slot] -= 1
                if holders[chunk.slot] == 0:
                    free.put(chunk.slot)

        whole = hashlib.sha256()
        errors: list[BaseException] = []
        aborted = threading.Event()
        to_hash: queue.SimpleQueue[Chunk | None] = queue.SimpleQueue()
        to_send: queue.SimpleQueue[Chunk | None] = queue.SimpleQueue()

        def hashing() -> None:
            while (chunk := to_hash.get()) is not None:
                if not errors:
                    try:
                        with stages.stage("file digest"):
                            whole.update(chunk.data)
                    except BaseException as exc:  # noqa: BLE001 - raised by the reader
                        errors.append(exc)
                release(chunk)

        def sending() -> None:
            window = SendWindow(self.store, self.pending_ms, release, stages)
            ended = False  # the reader's end mark taken: nothing more comes
            try:
                while (chunk := to_send.get()) is not None:
                    window.send(chunk)
                ended = True
                if aborted.is_set():
                    window.abandon()
                else:
                    window.finish()
                self.sent_bytes += window.sent_bytes
                self.resends += window.faults
            except BaseException as exc:  # noqa: BLE001 - raised by the reader
                errors.append(exc)
                try:
                    window.abandon()
                finally:  # every buffer back to the reader, which may wait for one
                    while not ended and (chunk := to_send.get()) is not None:
                        release(chunk)

        helpers = [threading.Thread(target=hashing, name="upload-file-digest", daemon=True),
                   threading.Thread(target=sending, name="upload-send", daemon=True)]
        for helper in helpers:
            helper.start()
        digests: list[str] = []
        size = 0
        data, slot = first, 0
        try:
            while True:
                with stages.stage("chunk digest"):
                    digest = hashlib.sha256(data).hexdigest()
                with lock:
                    holders[slot] = 2
                chunk = Chunk(digest, data, slot)
                to_hash.put(chunk)
                to_send.put(chunk)
                digests.append(digest)
                size += len(data)
                if progress is not None:
                    progress(len(data))
                if len(data) < CHUNK_BYTES or errors:
                    break
                slot = free.get()  # the helpers hand every buffer back, even failing
                with stages.stage("read"):
                    got = read_into(fd, buffers[slot])
                if not got:
                    break
                data = memoryview(buffers[slot])[:got]
        except BaseException:
            aborted.set()
            raise
        finally:
            to_hash.put(None)
            to_send.put(None)
            for helper in helpers:
                helper.join()
        if errors:
            raise errors[0]
        log.info("%s: sent %s", name, stages.summary(size))
        return FileEntry(name, mode, size, whole.hexdigest(), tuple(digests))

    def _send(self, batch: list[tuple[str, bytes | memoryview]]) -> None:
        """Send the chunks of `batch` the pool lacks. A small chunk goes through
        transfer_chunk.lua at once; for big ones the pool is asked first (one round trip
        for the batch), then the missing ones are sent with plain SETs (`_put`)."""
        small = [(digest, data) for digest, data in batch if len(data) <= ASK_FIRST_BYTES]
        big = [(digest, data) for digest, data in batch if len(data) > ASK_FIRST_BYTES]
        if self.hold_small:
            self._held.extend((digest, bytes(data)) for digest, data in small)
            if sum(len(data) for _, data in self._held) > HELD_MAX_BYTES:
                self.flush()
            small = []
        for digest, data in small:
            if calls.transfer_chunk(self.store, digest=digest, data=bytes(data),
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
        stored = self._put(missing)
        self.sent_bytes += sum(len(data) for (_, data), done in zip(missing, stored, strict=True)
                               if done)

    def flush(self) -> None:
        """Send the small chunks held back (`hold_small`) in one round trip."""
        held, self._held = self._held, []
        if not held:
            return
        if len(held) == 1:
            digest, data = held[0]
            if calls.transfer_chunk(self.store, digest=digest, data=data,
                                    pending_ms=self.pending_ms):
                self.sent_bytes += len(data)
            return

        def queue(pipe: Any) -> None:
            for digest, data in held:
                calls.queue_transfer_chunk(self.store, pipe, digest=digest, data=data,
                                           pending_ms=self.pending_ms)

        replies = self._pipelined(queue)
        self.sent_bytes += sum(len(data) for (_, data), stored in zip(held, replies, strict=True)
                               if stored)

    def _put(self, chunks: list[tuple[str, bytes | memoryview]]) -> list[Any]:
        """Send `chunks` with the plain SET transfer_chunk.lua leaves to its caller after
        an 'ask' (pending for `pending_ms`, unless the pool has the chunk), in one round
        trip; the replies (true when stored). The commands are packed so that a chunk's
        bytes go to the socket as they are: the client's default packer copies every
        argument into one string first, twice for a buffer, which costs as much CPU
        as a pass over the bytes and 8 MiB of memory per chunk in flight."""
        pool = self.store.client.connection_pool
        connection = pool.get_connection()
        packer = PythonRespSerializer(_PACK_CUTOFF_BYTES, connection.encoder.encode)

        def send() -> list[Any]:
            for digest, data in chunks:
                connection.send_packed_command(packer.pack(
                    "SET", self.store.keys.xfer_chunk(digest), data,
                    "PX", self.pending_ms, "NX"))
            return [connection.read_response() for _ in chunks]

        try:
            # Retried as the client retries a command (a pooled connection the server
            # closed, a failover): a SET ... NX sent twice stores the chunk once.
            replies: list[Any] = connection.retry.call_with_retry(
                send, lambda _error: connection.disconnect())
            return replies
        except BaseException:
            connection.disconnect()  # replies may be left unread on it
            raise
        finally:
            pool.release(connection)

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
        return self._from_pool(digest, name)

    def _chunk_into(self, digest: str, name: str, buffer: bytearray) -> bytes | memoryview:
        """One chunk, verified: read into `buffer` from the machine's cache, else from
        the pool (then in bytes of its own)."""
        if self.cache is not None:
            cached = self.cache.read_into(digest, buffer)  # checked by the cache
            if cached is not None:
                return cached
        return self._from_pool(digest, name)

    def _from_pool(self, digest: str, name: str) -> bytes:
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
        """Write `entry`'s bytes to `fd`, each chunk and the whole checked. For a file of
        several chunks, the file's digest is computed in a helper thread while the next
        chunk is read (and checked, when the cache must) and written; cached chunks are
        read into two buffers used in turn, one of them being hashed while the other
        is filled. A file the machine's cache checked whole as it filled
        (transfer/checkedfill.py) is copied from its chunks in the kernel instead."""
        started_s = time.perf_counter()
        if self.cache is not None and self.cache.copy_file(entry.sha256, entry.size,
                                                           entry.chunks, fd):
            if len(entry.chunks) > 1:
                log.info("%s: copied from the machine's cache into the sandbox in %.2f s",
                         entry.name, time.perf_counter() - started_s)
            return
        if len(entry.chunks) == 1:
            data = self.chunk(entry.chunks[0], entry.name)
            _write_all(fd, data)
            self._check_file(entry, len(data), hashlib.sha256(data).hexdigest())
            return
        whole = hashlib.sha256()
        size = 0
        buffers = self._chunk_buffers()
        with ThreadPoolExecutor(1, thread_name_prefix="download") as hasher:
            hashing: Future[None] | None = None
            for index, digest in enumerate(entry.chunks):
                # This buffer held the chunk two before, whose hashing is done: the
                # one before was submitted only after it.
                piece = self._chunk_into(digest, entry.name, buffers[index % 2])
                if hashing is not None:
                    hashing.result()
                hashing = hasher.submit(whole.update, piece)
                size += len(piece)
                _write_all(fd, piece)
            if hashing is not None:
                hashing.result()
        self._check_file(entry, size, whole.hexdigest())

    @staticmethod
    def _check_file(entry: FileEntry, size: int, digest: str) -> None:
        if size != entry.size or digest != entry.sha256:
            raise TransferError(f"{entry.name}: the file arrived with another size or "
                                "digest than it was sent with")
