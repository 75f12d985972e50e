"""The leader's user log writer: follows the pool's event stream and appends
HTCondor user log events (userlog/events.py) to the `UserLog` of each job
that has one, as HTCondor's schedd writes the log of a job's `log` command.

The writer's position in the stream (the id of the last entry it handled)
lives in Redis (store/keys.py `userlog`), so a restarted broker, or a standby that
takes the leadership over, goes on where the last leader stopped. A batch
is appended first and the position moved after (userlog_advance.lua, only
while the caller leads and nobody moved it meanwhile): a leader that dies
in between leaves that batch to the next one, which skips the events a
file already ends with, so no event is lost and none is written twice.
A file that cannot be written is logged, naming it, and skipped: it never
stops the broker.

The writer is one of the leader's duties (leader/duty.py). The leader's
reader starts at the newest entry when it takes the lead (`on_lead(since)`),
so the writer first catches up on its own: it reads the entries from its
stored position up to `since` (XRANGE), then writes the batches the reader
hands it. A batch it could not write (Redis or the lead lost meanwhile) is
left to that catch-up: the hand-over point moves past every batch handed
over, and the writer reads what lies before it from where it stopped.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from fetchwork.broker.store import Store, calls, codec, eventbatch
from fetchwork.errors import FetchworkError

from .events import JOB_FIELDS, render

log = logging.getLogger(__name__)

# How far back (bytes) a file is searched for events a former leader already wrote.
REPLAY_TAIL_BYTES = 1 << 20
# Longest the stored position lags the events read while nothing is written (seconds).
ADVANCE_S = 1.0
# Seconds before a served writer that found another replica leading looks again.
RETRY_S = 0.5


def stream_id(text: str) -> tuple[int, int]:
    """A stream entry id `ms-seq` as a comparable pair."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def log_path(job: dict[str, Any]) -> str | None:
    """The absolute path of a job's user log (a relative UserLog is under Iwd), or None."""
    path = job.get("UserLog")
    if not isinstance(path, str) or not path.strip():
        return None
    iwd = job.get("Iwd")
    if not os.path.isabs(path) and isinstance(iwd, str):
        path = os.path.join(iwd, path)
    return path if os.path.isabs(path) else None


def _tail(path: str) -> str:
    """The end of a file (at most REPLAY_TAIL_BYTES), '' when there is none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - REPLAY_TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class UserLogWriter:
    """Appends each job's user log events to its UserLog, batch by batch."""

    name = "userlog"
    reads_events = True

    def __init__(self, store: Store, replica: str, host: str | None = None, batch: int = 500):
        self.store = store
        self.replica = replica
        # What 000 events name as the host the job was submitted to (the queue's).
        self.host = f"<{host or socket.gethostname()}>"
        self.batch = batch
        # True until a batch has been written since this writer (re)took the lead.
        self._fresh = True
        # False when the last pass found another replica leading (it wrote nothing).
        self.leads = True
        # Where the next pass reads from; the position last stored (and when).
        self._read_from: str | None = None
        self._stored: str | None = None
        self._stored_at = -ADVANCE_S
        # Served (see the module text): the entries up to `_handover` are the writer's
        # to read, those after it are handed over; whether it has read them all.
        self._handover: str | None = None
        self._caught_up = False
        self._retry_at = -math.inf

    def reset(self) -> None:
        """Forget the lead (the next batch may be one a former leader half wrote)."""
        self._fresh = True

    def position(self) -> str | None:
        raw = self.store.client.get(self.store.keys.userlog)
        return codec.text(raw) if raw is not None else None

    def write_pass(self, block_ms: int = 0) -> int:
        """Write the next batch of events; the number of stream entries handled
        (0: none new, or this replica does not lead).

        While it leads, the writer reads on from where it stopped and stores its
        position only with a batch that wrote something (or after ADVANCE_S): a
        batch of events no job logs needs no write to Redis, and a new leader that
        reads those events again writes nothing for them either.
        """
        position = self._start()
        events = self.store.events(position or "0-0", block_ms=block_ms, count=self.batch)
        return self._write(position, events)

    def _start(self) -> str | None:
        """Where the writer goes on from: after a change of lead, the stored position."""
        if self._fresh:
            self._stored = self._read_from = self.position()
        return self._read_from

    def _write(self, position: str | None, events: Sequence[tuple[str, dict[str, str]]]) -> int:
        """Write `events` (the next after `position`) and move the stored position; the
        number of stream entries handled (0: none, or this replica does not lead)."""
        keys = self.store.keys
        self.leads = codec.text(self.store.client.get(keys.leader) or b"") == self.replica
        if not events or not self.leads:
            self._fresh = self._fresh or not self.leads
            return 0
        if self._fresh and position is not None:
            self._warn_if_trimmed(position)
        written = 0
        for path, texts in self._texts(events).items():
            written += self._append(path, texts)
        newest, now = events[-1][0], time.monotonic()
        if written or now - self._stored_at >= ADVANCE_S:
            moved = calls.userlog_advance(self.store, replica=self.replica,
                                          read_position=self._stored or "", new_position=newest)
            if not moved:
                log.info("user log writer %s no longer leads; stopped at %s", self.replica,
                         self._stored)
                self._fresh, self.leads = True, False
                return 0
            self._stored, self._stored_at = newest, now
        self._read_from = newest
        self._fresh = False
        return len(events)

    def skip_to(self, newest: str) -> None:
        """While no job uses a user log: store `newest` (read before the pool was seen
        unmarked, see `note_user_logs`) as the position, so a writer that starts reading
        later goes on from there rather than from events no job logs."""
        if newest in ("", "0-0") or newest == self._stored:
            return
        stored = self.position()
        if stored is not None and stream_id(stored) >= stream_id(newest):
            return
        if calls.userlog_advance(self.store, replica=self.replica, read_position=stored or "",
                                 new_position=newest):
            self._stored = self._read_from = newest

    def drain(self) -> int:
        """Write every event there is now; how many stream entries were handled."""
        total = 0
        while True:
            done = self.write_pass()
            total += done
            if done < self.batch:
                return total

    # -- as a duty of the leader (leader/duty.py) ---------------------------------------

    def on_lead(self, since: str) -> None:
        """The entries after `since` will be handed over; those before it, from the
        stored position on, the writer reads itself (a former leader may have half
        written the first batch)."""
        self._fresh = True
        self._handover, self._caught_up, self._retry_at = since, False, -math.inf

    def on_lose(self) -> None:
        self._fresh, self._caught_up = True, False

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> None:
        """Write a batch the leader's reader handed over (after catching up)."""
        try:
            if not self._caught_up:
                self._catch_up(time.monotonic())
            if self._caught_up:
                self._caught_up = False  # until this batch is written
                position = self._start()
                handed = [event for event in events
                          if position is None or stream_id(event[0]) > stream_id(position)]
                if handed:
                    self._write(position, handed)
                self._caught_up = self.leads or not handed
                if not self._caught_up:
                    self._retry_at = time.monotonic() + RETRY_S
        except BaseException:
            self._fresh = True  # what was appended before the failure is not written twice
            raise
        finally:
            if self._handover is None or stream_id(events[-1][0]) > stream_id(self._handover):
                self._handover = events[-1][0]  # a batch not written is the catch-up's

    def due_in_s(self, now_s: float) -> float:
        return math.inf if self._caught_up else max(0.0, self._retry_at - now_s)

    def run_due(self, now_s: float) -> None:
        try:
            self._catch_up(now_s)
        except BaseException:
            self._fresh = True
            raise

    def close(self) -> None:
        pass

    def _catch_up(self, now_s: float) -> None:
        """Write the entries up to the hand-over point that are not written yet."""
        while not self._caught_up:
            position = self._start()
            until = self._handover
            if until is None or (position is not None
                                 and stream_id(position) >= stream_id(until)):
                self._caught_up = True
                return
            events = self._range(position, until)
            self._write(position, events)
            if not self.leads:
                self._retry_at = now_s + RETRY_S
                return
            self._caught_up = len(events) < self.batch

    def _range(self, after: str | None, until: str) -> list[tuple[str, dict[str, str]]]:
        """At most `batch` stream entries after `after` (None: from the first), up to
        and including `until`."""
        raw: Any = self.store.client.xrange(self.store.keys.events,
                                            "-" if after is None else f"({after}", until,
                                            count=self.batch)
        return eventbatch.expand_all(
            [(codec.text(entry_id), {codec.text(k): codec.text(v) for k, v in fields.items()})
             for entry_id, fields in raw])

    def _texts(self, events: Sequence[tuple[str, dict[str, str]]]) -> dict[str, list[str]]:
        """Log path -> the texts to append to it, in stream order."""
        job_ids = list(dict.fromkeys(fields.get("job", "") for _id, fields in events))
        jobs = {job: dict(zip(JOB_FIELDS, values, strict=True))
                for job, values in zip(job_ids, self.store.fields(job_ids, JOB_FIELDS),
                                       strict=True)}
        out: dict[str, list[str]] = defaultdict(list)
        for event_id, fields in events:
            job = jobs.get(fields.get("job", ""), {})
            path = log_path(job)
            if path is None:
                continue
            try:
                text = render(event_id, fields, job, self.host)
            except (FetchworkError, ValueError) as exc:
                log.warning("user log: cannot write event %s of job %s: %s", event_id,
                            fields.get("job"), exc)
                continue
            if text:
                out[path].append(text)
        return out

    def _append(self, path: str, texts: list[str]) -> int:
        """Append `texts` (less what a former leader wrote); how many were new."""
        if self._fresh:
            tail = _tail(path)
            texts = [text for text in texts if text not in tail]
        if not texts:
            return 0
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("".join(texts))
        except OSError as exc:
            log.warning("cannot write the user log %s (%d event(s) lost): %s", path,
                        len(texts), exc)
        return len(texts)

    def _warn_if_trimmed(self, position: str) -> None:
        """Warn when the stream no longer holds the entry after `position`."""
        first: Any = self.store.client.xrange(self.store.keys.events, count=1)
        if first and stream_id(codec.text(first[0][0])) > stream_id(position):
            log.warning("the event stream was trimmed past the user log writer's position %s: "
                        "user log events may be missing (raise BROKER_EVENTS_MAXLEN)", position)
