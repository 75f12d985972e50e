"""A big file's chunks sent to the pool on one connection, several in flight.

A chunk of a few MiB costs Redis most of its time reading it from the socket and
appending it to its append-only file; what the upload must not do is leave Redis
idle between two chunks while the client waits for a reply, wakes up and starts
the next. So the chunks of one file go on one connection as a stream of commands
whose replies are read later, in order (Redis answers in the order it was asked):

    ASK 1, ASK 2, SET 1, ASK 3, SET 2, ASK 4, SET 3, ...

`ASK k` is transfer_chunk.lua in its asking form (does the pool hold the chunk?
a pending one keeps its TTL), `SET k` the plain `SET key bytes PX ms NX` it leaves
to its caller for a chunk the pool lacks. Chunk k's ask goes before chunk k-1's SET:
its answer comes back while Redis still reads the SET before it, and chunk k's SET
is then on the socket before Redis is done with that one. At most `window` SETs are
unanswered at a time; their buffers stay with the sender until answered (the caller
recycles a buffer once `done(chunk)` is called for it), so a connection that drops
mid-window is reconnected and the unanswered chunks asked and sent again from the
bytes still held (`SET ... NX` twice stores a chunk once). A script the server lost
(NOSCRIPT, a Redis restarted) is loaded again the same way. Past `RETRIES` such
faults the error goes to the caller: the chunks sent so far stay pending with their
TTL, so an upload started again sends only the rest, and one that is not started
again leaves nothing once the TTL passes.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.connection import PythonRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fetchwork.broker.store import Store, calls

from .stagetimes import StageTimes

log = logging.getLogger(__name__)

# SETs sent and not yet answered, at most: one Redis is reading, one queued behind it.
WINDOW = 2
# Faults of the connection (or a lost script) survived in one file's upload.
RETRIES = 3
# Arguments longer than this are handed to the socket apart from the command's
# header, as they are: the client's own packer would copy a chunk into one string.
_PACK_CUTOFF_BYTES = 6000


@dataclass(eq=False)
class Chunk:
    """One chunk of the file: its digest and its bytes (a view of a buffer the caller
    reuses once `done` was called with it)."""

    digest: str
    data: memoryview
    # Which of the caller's buffers holds it.
    slot: int = 0


class SendWindow:
    """Sends the chunks of one file, in order, with their asks ahead of their SETs."""

    def __init__(self, store: Store, pending_ms: int, done: Callable[[Chunk], None],
                 stages: StageTimes, window: int = WINDOW):
        self.store = store
        self.pending_ms = pending_ms
        self.done = done
        self.stages = stages
        self.window = window
        self.sent_bytes = 0
        self._pool = store.client.connection_pool
        self._connection: Any = None
        self._packer: PythonRespSerializer | None = None
        # Replies awaited, in order: ("ask" | "set", chunk).
        self._expected: deque[tuple[str, Chunk]] = deque()
        # Chunks asked about whose answer is not read yet, or whose SET is unanswered:
        # what a new connection must ask and send again.
        self._held: list[Chunk] = []
        self._asked: Chunk | None = None
        # Faults of the connection (or lost scripts) survived so far.
        self.faults = 0

    # -- the stream ---------------------------------------------------------------------

    def send(self, chunk: Chunk) -> None:
        """Ask about `chunk`, then decide and send the chunk asked about before it."""
        self._held.append(chunk)
        self._attempt(lambda: self._advance(chunk), again=False)

    def finish(self) -> None:
        """Decide the last chunk and read every reply; the connection goes back."""
        try:
            self._attempt(self._drain, again=True)
        finally:
            self._close(reuse=True)

    def abandon(self) -> None:
        """The upload ends on an error elsewhere: drop the connection (replies may be
        unread on it) and hand back every chunk held."""
        self._close(reuse=False)
        for chunk in self._held:
            self.done(chunk)
        self._held.clear()
        self._expected.clear()
        self._asked = None

    def _advance(self, chunk: Chunk) -> None:
        self._ask(chunk)
        previous, self._asked = self._asked, chunk
        if previous is not None:
            self._decide(previous)

    def _drain(self) -> None:
        if self._asked is not None:
            previous, self._asked = self._asked, None
            self._decide(previous)
        while self._expected:
            self._read_one()

    def _decide(self, chunk: Chunk) -> None:
        """Read replies up to `chunk`'s answer; send its SET when the pool lacks it."""
        answer = None
        while self._expected:
            kind, which = self._expected[0]
            reply = self._read_one()
            if kind == "ask" and which is chunk:
                answer = reply
                break
        if answer == -1:
            with self.stages.stage("SET"):
                self._write("SET", self.store.keys.xfer_chunk(chunk.digest), chunk.data,
                            "PX", self.pending_ms, "NX")
            self._expected.append(("set", chunk))
            while sum(1 for kind, _ in self._expected if kind == "set") > self.window:
                self._read_one()
        else:  # the pool has it (a pending one's TTL renewed): nothing to send
            self._release(chunk)

    def _ask(self, chunk: Chunk) -> None:
        with self.stages.stage("existence check"):
            self._write(*calls.ask_transfer_chunk_command(self.store, digest=chunk.digest,
                                                          pending_ms=self.pending_ms))
        self._expected.append(("ask", chunk))

    def _read_one(self) -> Any:
        kind, chunk = self._expected[0]
        with self.stages.stage("SET replies" if kind == "set" else "existence check"):
            reply = self._connection.read_response()
        self._expected.popleft()
        if kind == "set":
            if reply:
                self.sent_bytes += len(chunk.data)
            self._release(chunk)
        return reply

    def _release(self, chunk: Chunk) -> None:
        self._held.remove(chunk)
        self.done(chunk)

    # -- the connection -----------------------------------------------------------------

    def _write(self, *args: Any) -> None:
        if self._connection is None:
            self.store.scripts.ensure_loaded(["transfer_chunk"])
            self._connection = self._pool.get_connection()
            self._packer = PythonRespSerializer(_PACK_CUTOFF_BYTES,
                                                self._connection.encoder.encode)
        assert self._packer is not None
        self._connection.send_packed_command(self._packer.pack(*args))

    def _attempt(self, action: Callable[[], None], again: bool) -> None:
        """`action`; after a fault of the connection or a lost script, a new connection
        on which the chunks held are asked about again (then `action` again when
        `again`: what it did is not redone by asking again)."""
        first = True
        while True:
            try:
                if first:
                    action()
                else:
                    self._resume()
                    if again:
                        action()
                return
            except (RedisConnectionError, RedisTimeoutError, NoScriptError) as exc:
                first = False
                self._close(reuse=False)
                self.faults += 1
                if self.faults > RETRIES:
                    raise
                log.warning("sending chunks: %s; asking about the %d unanswered chunk(s) "
                            "again on a new connection", exc, len(self._held))
                if isinstance(exc, NoScriptError):
                    self.store.scripts.forget()

    def _resume(self) -> None:
        """Ask about every chunk held again, in order, on a new connection; the last one
        stays to be decided with the next chunk, the others are decided now."""
        self._expected.clear()
        self._asked = None
        for chunk in list(self._held):
            self._advance(chunk)

    def _close(self, reuse: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if not reuse:
            connection.disconnect()
        self._pool.release(connection)
