"""The leader's one reader of the pool's event stream, and its duties' threads.

`LeaderDuties` starts, feeds, stops and joins the leader's duties
(leader/duty.py) in one place. Its reader thread reads the event stream
only while this replica leads: on taking the lead it starts at the newest
entry (each duty is told with `on_lead`, and catches up on its own what it
needs from before), then blocks on XREAD and hands every batch to the inbox
of each duty that reads events. A duty's thread applies what its inbox
gathered and runs the duty's passes (`drive`). On losing the lead the
inboxes drop what they hold and a batch read across the change is dropped
too: a duty never sees events of another replica's leadership as its own.

A duty may read events only while the pool uses its feature
(leader/interest.py): the reader hands each batch to the duties that read
events at the time, hands a duty that starts reading over as on taking the
lead (from the last entry read, or the newest one), and reads nothing while
no duty reads events.

A duty that needs only to know that a key changed names it (`watch_keys`,
leader/watch.py): while the leader's one watch of those keys works, the duty
reads no events, and a change of a key brings its pass on the watch's thread
when the duty's own thread is idle, else wakes that thread through its inbox.

A duty paced anyway may let the reader gather events (`events_batch_s`, an
optional attribute of a duty; 0 when absent): after a batch the reader waits
the least such time of the duties reading events before its next XREAD, so
a stream of transitions costs one XREAD (and one hand-over) per that time,
not one per transition or two. The backfill pass, at most every
BACKFILL_MIN_INTERVAL anyway, asks for it while no reservation stands.

The reader starts at the newest entry rather than at the oldest one any
duty still needs: only the user log writer needs older ones (from its
stored position), and starting there would hand every other duty a replay
of events it has no use for, and hold its first pass back until the
replay is read. The writer catches up on its own instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from types import TracebackType

from fetchwork.broker.store import Store

from .duty import RETRY_S, Duty, Inbox, drive
from .interest import WhenInUse
from .watch import KeyWatch, Watched, watch_keys

log = logging.getLogger(__name__)

# Longest XREAD BLOCK (well inside a client's socket timeout): how long a stop
# waits for the reader at most.
BLOCK_S = 0.5
# Stream entries per XREAD.
READ_COUNT = 1000
# Longest wait for all the threads to end on stop.
JOIN_S = 5.0


class LeaderDuties:
    """The reader and one thread per duty: started together, stopped and joined together.
    `set_leading` tells them whether this replica leads (the service's tick does)."""

    def __init__(self, store: Store, duties: Sequence[Duty], block_s: float = BLOCK_S,
                 count: int = READ_COUNT):
        self.store = store
        self.block_s = block_s
        self.count = count
        # The duties woken by a change of a key (leader/watch.py), and the one watch of
        # all their keys; a duty reads events while the watch does not work.
        watched = {index: watch_keys(duty) for index, duty in enumerate(duties)}
        watched = {index: keys for index, keys in watched.items() if keys}
        self.watch = (KeyWatch(store, [key for keys in watched.values() for key in keys],
                               self._key_changed, self._watch_turned)
                      if watched else None)
        self.duties: list[Duty] = [
            Watched(duty, self._watching) if index in watched else duty
            for index, duty in enumerate(duties)]
        self._watched = watched
        self._inboxes = [Inbox(duty.name) for duty in self.duties]
        self._cond = threading.Condition()
        self._leading = False
        # Grows on every change of leadership: a batch read across one is dropped.
        self._epoch = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        for duty, inbox in zip(self.duties, self._inboxes, strict=True):
            if isinstance(duty, WhenInUse):
                duty.wake = self._wake
            if isinstance(duty, Watched):
                duty.wake = inbox.poke
                duty.settled = inbox.settled
            if hasattr(duty, "reading_changed"):  # its reads_events may turn (backfill)
                duty.reading_changed = self._wake

    def __enter__(self) -> LeaderDuties:
        self.start()
        return self

    def __exit__(self, _type: type[BaseException] | None, _value: BaseException | None,
                 _traceback: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._read, name="broker-events", daemon=True)]
        self._threads += [threading.Thread(target=drive, args=(duty, inbox), daemon=True,
                                           name=f"broker-{duty.name}")
                          for duty, inbox in zip(self.duties, self._inboxes, strict=True)]
        for thread in self._threads:
            thread.start()
        if self.watch is not None:
            self.watch.start()

    def set_leading(self, leads: bool) -> None:
        """Whether this replica leads now; a change is handed to every duty."""
        with self._cond:
            if leads == self._leading:
                return
            self._leading = leads
            self._epoch += 1
            if not leads:
                for inbox in self._inboxes:
                    inbox.lose()
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the reader and every duty, wait for their threads (at most JOIN_S in
        all), then close each duty."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.watch is not None:
            self.watch.stop()
        for inbox in self._inboxes:
            inbox.close()
        deadline = time.monotonic() + JOIN_S
        if self.watch is not None:
            self.watch.join(JOIN_S)
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("thread %s did not stop within %ss", thread.name, JOIN_S)
        for duty in self.duties:
            try:
                duty.close()
            except Exception:
                log.exception("closing leader duty %s failed", duty.name)

    def _read(self) -> None:
        """The reader thread: while leading, XREAD after XREAD, each batch to the inboxes
        of the duties that read events now; while none does, no XREAD at all."""
        position, read_epoch = "", -1
        fed: set[int] = set()  # the duties handed every event after `position`
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._leading or self._stopping)
                if self._stopping:
                    return
                epoch = self._epoch
            try:
                if epoch != read_epoch:
                    position, read_epoch = self._lead(epoch)
                    fed = self._reading()
                    continue
                reading = self._reading()
                if not reading:
                    fed = set()
                    self._await_reader(epoch)
                    continue
                if reading - fed:
                    handed = self._hand_over(epoch, reading - fed, position if fed else None)
                    if handed is None:
                        continue
                    position = handed
                fed = reading
                events = self.store.events(position, block_ms=int(self.block_s * 1000),
                                           count=self.count)
            except Exception:  # never end the reader: the duties would wait for events forever
                log.exception("reading the event stream failed; trying again in %ss", RETRY_S)
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, RETRY_S)
                continue
            if not events:
                continue
            with self._cond:
                if epoch != self._epoch:
                    continue  # the lead changed while this batch was read
                for index in fed:
                    self._inboxes[index].put(events)
            position = events[-1][0]
            self._gather(epoch, fed)

    def _gather(self, epoch: int, fed: set[int]) -> None:
        """Let events gather for the least `events_batch_s` of the duties fed (none
        when any of them wants each batch at once); a stop or a change of lead ends
        the wait."""
        pause_s = min((batch_s(self.duties[index]) for index in fed), default=0.0)
        if pause_s > 0:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or epoch != self._epoch, pause_s)

    def _await_reader(self, epoch: int) -> None:
        """Until a duty wants events (`_wake`), the lead changes or the reader stops
        (at most `block_s`: a duty's wish is also seen without a wake-up)."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping or epoch != self._epoch
                                or bool(self._reading()), self.block_s)

    def _reading(self) -> set[int]:
        """The duties that read events now (a duty may start or stop, leader/interest.py)."""
        return {index for index, duty in enumerate(self.duties) if duty.reads_events}

    def _hand_over(self, epoch: int, joining: set[int], position: str | None) -> str | None:
        """Duties that start reading events get those after `position` (None: after the
        newest, when nothing was read meanwhile), as on taking the lead; the position,
        or None when the lead changed meanwhile."""
        since = self.store.last_event_id() if position is None else position
        with self._cond:
            if epoch != self._epoch:
                return None
            for index in joining:
                self._inboxes[index].lead(since)
        return since

    def _watching(self) -> bool:
        return self.watch is not None and self.watch.working

    def _key_changed(self, key: str) -> None:
        """The watch saw `key` change: the duties watching it have a pass due."""
        for index, keys in self._watched.items():
            duty = self.duties[index]
            if key in keys and isinstance(duty, Watched):
                duty.on_change()

    def _watch_turned(self) -> None:
        """The watch started or stopped working: the reader looks again at who reads
        events, and the watched duties pass at once (a change may have come between)."""
        for index in self._watched:
            duty = self.duties[index]
            if isinstance(duty, Watched):
                duty.on_change()
        self._wake()

    def _wake(self) -> None:
        """A duty wants events: a reader waiting for one to want them reads again now."""
        with self._cond:
            self._cond.notify_all()

    def _lead(self, epoch: int) -> tuple[str, int]:
        """Start a leadership's reads at the newest entry and tell every duty so;
        (position, epoch), or no epoch when the lead changed again meanwhile."""
        since = self.store.last_event_id()
        with self._cond:
            if epoch != self._epoch:
                return "", -1
            for inbox in self._inboxes:
                inbox.lead(since)
        return since, epoch


def batch_s(duty: Duty) -> float:
    """How long the duty lets events gather between two reads (0: it wants each
    batch at once); an optional attribute of a duty."""
    return max(0.0, float(getattr(duty, "events_batch_s", 0.0)))
