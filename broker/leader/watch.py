"""Duties woken by a change of a key instead of by the event stream.

A duty that needs only to know that one key changed (the filters of a pool
that only signs its jobs: that a submission put jobs in the validating set)
would otherwise read every transition of the pool to find the few that
concern it: an XREAD, its decoding and a hand-over per batch, two a job
while the queue flows. Such a duty names the keys (`watch_keys`, an optional
attribute of a duty; none when absent), and the leader watches them with
one connection of its own in Redis's broadcast tracking mode (`CLIENT
TRACKING ON BCAST PREFIX key ... NOLOOP`, RESP3): the server pushes one
invalidation message per change of a watched key (a script that changes it
a thousand times pushes one), nothing when other keys change, so a pool
whose queue flows costs the watch nothing.

While the watch works the duty reads no events (`Watched.reads_events`),
and a message makes its pass due at once. The watch's own thread runs that
pass when the duty is idle, leads and has no mail waiting in its inbox (a
lone submission is then admitted without waking the duty's thread, 0.2 ms
sooner on the path from submit to start); otherwise it wakes the
duty's thread, which runs the pass after what it is doing. Either thread
runs the duty only while holding the duty's lock, so its state is still
changed by one thread at a time. A pass that fails on the watch's thread
is logged and tried again by the duty's thread after RETRY_S, as a pass that
fails there is. When the watch does not work (a
server or client without RESP3 push messages, a lost connection) the duty
reads events as before, and the reader hands them over as on taking the
lead (leader/reader.py); a watch that works again makes a pass due at once,
for the changes it may have missed. No change is lost either way: the
duty's pass reads the key's state itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from fetchwork.broker.store import Store, codec

from .duty import RETRY_S, Duty, Event

log = logging.getLogger(__name__)

# Longest wait for a message before the watch looks whether it should stop.
WAIT_S = 0.5
# Seconds before the watch tries again after the server refused it (no RESP3, an ACL
# user without CLIENT TRACKING): it is not likely to accept a moment later.
REFUSED_RETRY_S = 60.0


def watch_keys(duty: Duty) -> tuple[str, ...]:
    """The keys whose change brings the duty's pass (none: it reads events)."""
    return tuple(getattr(duty, "watch_keys", ()) or ())


class Watched:
    """`duty`, woken by a change of its `watch_keys` while `watching()` is true, and
    reading events only while it is not. Every call into `duty` holds its lock."""

    def __init__(self, duty: Duty, watching: Callable[[], bool]):
        self.duty = duty
        self.watching = watching
        self.changed = False
        # Wakes the duty's thread (set by the leader's reader to poke its inbox).
        self.wake: Callable[[], None] = lambda: None
        # Whether the duty's thread has nothing to hand the duty first (leading, its
        # inbox empty): the watch's thread may run the pass (set by the reader).
        self.settled: Callable[[], bool] = lambda: False
        self._lock = threading.Lock()
        # A pass that failed on the watch's thread: the next one comes no sooner.
        self._retry_at: float | None = None

    @property
    def name(self) -> str:
        return self.duty.name

    @property
    def reads_events(self) -> bool:
        return self.duty.reads_events and not self.watching()

    def on_change(self) -> None:
        """A watched key changed (or the watch started again): a pass is due now, run
        here when `pass_here` may, else on the duty's thread."""
        self.changed = True
        if not self.pass_here():
            self.wake()

    def pass_here(self) -> bool:
        """The pass a change brought, on the calling thread (the watch's), if the duty
        is idle and settled and no failed pass waits for its retry; whether it ran.
        Never waits for the duty's thread."""
        if self._retry_at is not None or not self.settled():
            return False
        if not self._lock.acquire(blocking=False):
            return False  # the duty's thread is in it: it passes again after
        try:
            self.changed = False  # a change during the pass brings another
            self.duty.run_due(time.monotonic())
            if self.duty.due_in_s(time.monotonic()) <= 0:
                self.wake()  # more to do at once (a batch left): the duty's thread goes on
        except Exception:
            log.exception("leader duty %s failed; trying again in %ss", self.name, RETRY_S)
            self.changed = True
            self._retry_at = time.monotonic() + RETRY_S
            return False
        finally:
            self._lock.release()
        return True

    def on_lead(self, since: str) -> None:
        with self._lock:
            self.duty.on_lead(since)

    def on_lose(self) -> None:
        with self._lock:
            self.changed = False
            self.duty.on_lose()

    def on_events(self, events: Sequence[Event]) -> object:
        with self._lock:
            return self.duty.on_events(events)

    def due_in_s(self, now_s: float) -> float:
        with self._lock:
            if self._retry_at is not None and now_s < self._retry_at:
                return self._retry_at - now_s
            return 0.0 if self.changed else self.duty.due_in_s(now_s)

    def run_due(self, now_s: float) -> object:
        with self._lock:
            self._retry_at = None
            self.changed = False  # a change during the pass brings another
            return self.duty.run_due(now_s)

    def close(self) -> None:
        with self._lock:
            self.duty.close()


class KeyWatch:
    """One connection tracking `keys` (broadcast mode), calling `on_change(key)` for
    each of them on every change pushed (the client does not say which key changed),
    on its own thread until `stop`. `working` is true while the
    tracking is in place; `on_state()` is called whenever it turns."""

    def __init__(self, store: Store, keys: Sequence[str], on_change: Callable[[str], None],
                 on_state: Callable[[], None], wait_s: float = WAIT_S):
        self.store = store
        self.keys = sorted(set(keys))
        self.on_change = on_change
        self.on_state = on_state
        self.wait_s = wait_s
        self.working = False
        # The server's id of the watch's connection while it has one (logs, tests).
        self.client_id: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="broker-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn: Any = None
            retry_s = RETRY_S
            try:
                conn = self._connect()
                self._set_working(True)
                while not self._stop.is_set():
                    if conn.can_read(timeout=self.wait_s):
                        # An invalidation push (redis-py hands it over as None): one of
                        # the watched keys changed; every duty watching one passes.
                        conn.read_response(push_request=True)
                        for key in self.keys:
                            self.on_change(key)
            except (redis.RedisError, OSError, ValueError) as exc:
                if isinstance(exc, redis.ResponseError | ValueError):
                    retry_s = REFUSED_RETRY_S
                if not self._warned:
                    log.warning("watching %s failed (%s): the duties that watch them read "
                                "the event stream instead", " ".join(self.keys), exc)
                    self._warned = True
            finally:
                self._set_working(False)
                if conn is not None:
                    conn.disconnect()
            self._stop.wait(retry_s)

    def _connect(self) -> Any:
        """A connection of its own (the client's settings: socket, TLS, credentials),
        tracking the keys; ValueError when it cannot receive push messages (RESP2)."""
        conn: Any = self.store.client.connection_pool.make_connection()
        conn.connect()
        if str(getattr(conn, "protocol", 2)) != "3":
            conn.disconnect()
            raise ValueError("the connection does not speak RESP3")
        conn.send_command("CLIENT", "ID")
        self.client_id = int(conn.read_response())
        prefixes = [word for key in self.keys for word in ("PREFIX", key)]
        conn.send_command("CLIENT", "TRACKING", "ON", "BCAST", *prefixes, "NOLOOP")
        reply = conn.read_response()
        if codec.text(reply) != "OK":
            raise ValueError(f"CLIENT TRACKING answered {reply!r}")
        if self._warned:
            log.info("watching %s again", " ".join(self.keys))
            self._warned = False
        log.debug("watching %s on connection %s", " ".join(self.keys), self.client_id)
        return conn

    def _set_working(self, working: bool) -> None:
        if working != self.working:
            self.working = working
            self.on_state()
