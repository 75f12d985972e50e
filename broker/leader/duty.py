"""What the leader asks of each of its duties, and the loop that drives one.

A duty is one of the leader's standing jobs: the filters (admissions,
activations, timed holds), the dependency resolver, the user log writer, the
scheduling policy's passes, the backfill reservation and the periodic job
policy. Each keeps its own logic and pacing in its own package; the service
drives them all through one small interface, `Duty`:

- `on_lead(since)`: this replica took the lead. Every event after stream
  entry `since` is handed to the duty, none before it (a duty that needs
  older ones reads them itself: the user log from its stored position).
  Also called again while leading when the duty fell so far behind that
  its inbox dropped events (see `Inbox`): the same resync as a new leader's.
- `on_lose()`: another replica leads now; nothing is handed over until the
  next `on_lead`.
- `on_events(events)`: a batch of transition events in stream order, only
  while leading and only to a duty whose `reads_events` is true.
- `due_in_s(now_s)`: seconds until its next pass when no further event
  comes (0: now; `math.inf`: only an event or the lead brings one).
- `run_due(now_s)`: that pass.
- `close()`: at shutdown, once its thread has stopped.

`now_s` is always `time.monotonic()`.

Threads: one reader thread (leader/reader.py) does the pool's only XREAD
and hands each batch to every duty's `Inbox`; each duty has a thread of its
own that takes its inbox's mail and runs `drive`. A thread per duty rather
than one for all, because their passes differ in cost by orders of
magnitude and some wait on what the leader cannot bound: a scheduling pass
reads every unfinished job (seconds in a large queue), a user log append
waits on a shared file system, a dependency sweep reads every waiting job.
A claim waiting on an activation verdict must not wait behind any of them:
the filter pass that hands the chain to its executor is due within
milliseconds of the ACTIVATING event (the filter programs themselves run
in that executor, so the filter pass is short). Each duty's state is then
changed by its own thread only, and needs no lock (the backfill reservation
the filters read is replaced whole, never changed in place); a duty woken by
a key's change may have its pass run by the key watch's thread instead,
which takes the duty's lock as the duty's thread then does (leader/watch.py).
What costs Redis is the XREADs, not the threads, which wait on a condition:
one XREAD per batch of events, whatever the number of duties, and none at
all on a replica that does not lead.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

# A stream entry: (id, fields), as Store.events returns it.
Event = tuple[str, dict[str, str]]

# Seconds a duty waits after its pass failed before it tries again.
RETRY_S = 1.0
# Events an inbox holds for a duty that has not taken them; past that it drops
# them and resyncs the duty (on_lead) from the newest one dropped.
MAX_PENDING = 100_000


class Duty(Protocol):
    """One of the leader's duties, as the service drives it (see the module text)."""

    @property
    def name(self) -> str: ...

    @property
    def reads_events(self) -> bool: ...

    def on_lead(self, since: str) -> None: ...

    def on_lose(self) -> None: ...

    def on_events(self, events: Sequence[Event]) -> object: ...

    def due_in_s(self, now_s: float) -> float: ...

    def run_due(self, now_s: float) -> object: ...

    def close(self) -> None: ...


@dataclass
class Mail:
    """What a duty's inbox gathered since the duty last looked, in the order to apply it:
    the lead lost, then the lead (re)taken from `since`, then the events after it."""

    leading: bool
    lost: bool = False
    since: str | None = None
    events: list[Event] = field(default_factory=list)


class Inbox:
    """The reader's hand-over to one duty: the events and leadership changes the duty
    has yet to take. The reader's thread puts, the duty's thread takes."""

    def __init__(self, name: str, max_pending: int = MAX_PENDING):
        self.name = name
        self.max_pending = max_pending
        self._cond = threading.Condition()
        self._leading = False
        self._lost = False
        self._since: str | None = None
        self._events: list[Event] = []
        self._closed = False
        self._poked = False
        # The duty's thread waits in `take`: it has applied every mail taken before.
        self._waiting = False

    def lead(self, since: str) -> None:
        """The lead was taken: events after `since` follow."""
        with self._cond:
            self._leading = True
            self._since = since
            self._events = []
            self._cond.notify()

    def lose(self) -> None:
        """The lead was lost: what was not taken yet is dropped."""
        with self._cond:
            if self._leading:
                self._lost = True
            self._leading = False
            self._since = None
            self._events = []
            self._poked = False
            self._cond.notify()

    def put(self, events: Sequence[Event]) -> None:
        """Hand `events` over (dropped when not leading). Past `max_pending` untaken
        events, all are dropped and the duty is resynced from the newest."""
        dropped = 0
        with self._cond:
            if not self._leading or not events:
                return
            self._events.extend(events)
            if len(self._events) > self.max_pending:
                dropped = len(self._events)
                self._since = self._events[-1][0]
                self._events = []
            self._cond.notify()
        if dropped:
            log.warning("leader duty %s fell %d events behind: it resyncs from %s",
                        self.name, dropped, events[-1][0])

    def poke(self) -> None:
        """Wake the duty with nothing new (leader/watch.py: a key it watches changed), so
        it runs its pass when due; nothing while not leading."""
        with self._cond:
            if self._leading:
                self._poked = True
                self._cond.notify()

    def settled(self) -> bool:
        """Leading, with the duty's thread waiting for mail and none to take: the duty
        has applied everything handed over (leader/watch.py runs a pass then)."""
        with self._cond:
            return self._leading and self._waiting and not self._has_mail()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def take(self, timeout_s: float | None) -> Mail | None:
        """What came since the last take, waiting for something at most `timeout_s`
        (None: until something comes); None once closed."""
        with self._cond:
            self._waiting = True
            try:
                self._cond.wait_for(self._has_mail, timeout_s)
            finally:
                self._waiting = False
            if self._closed:
                return None
            mail = Mail(self._leading, self._lost, self._since, self._events)
            self._lost, self._since, self._events, self._poked = False, None, [], False
            return mail

    def pause(self, seconds: float) -> None:
        """Wait `seconds`, or until closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed, seconds)

    def _has_mail(self) -> bool:
        return (self._closed or self._lost or self._poked or self._since is not None
                or bool(self._events))


def drive(duty: Duty, inbox: Inbox, clock: Callable[[], float] = time.monotonic) -> None:
    """Run `duty` on this thread from its inbox until the inbox is closed: apply what
    came, then run its pass when due. A pass that fails is logged and tried again
    after RETRY_S: a duty's trouble never stops the broker."""
    leading = False
    while True:
        try:
            wait_s = max(0.0, duty.due_in_s(clock())) if leading else None
            mail = inbox.take(None if wait_s is None or math.isinf(wait_s) else wait_s)
            if mail is None:
                return
            leading = mail.leading
            if mail.lost:
                duty.on_lose()
            if mail.since is not None:
                duty.on_lead(mail.since)
            if not leading:
                continue
            if mail.events:
                duty.on_events(mail.events)
            now_s = clock()
            if duty.due_in_s(now_s) <= 0:
                duty.run_due(now_s)
        except Exception:
            log.exception("leader duty %s failed; trying again in %ss", duty.name, RETRY_S)
            inbox.pause(RETRY_S)
