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
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from fetchwork.broker.store import Store, calls, codec
from fetchwork.errors import FetchworkError

from .events import JOB_FIELDS, render

log = logging.getLogger(__name__)

# How far back (bytes) a file is searched for events a former leader already wrote.
REPLAY_TAIL_BYTES = 1 << 20
# Longest the stored position lags the events read while nothing is written (seconds).
ADVANCE_S = 1.0


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
        if self._fresh:
            self._stored = self._read_from = self.position()
        position = self._read_from
        events = self.store.events(position or "0-0", block_ms=block_ms, count=self.batch)
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

    def drain(self) -> int:
        """Write every event there is now; how many stream entries were handled."""
        total = 0
        while True:
            done = self.write_pass()
            total += done
            if done < self.batch:
                return total

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
        first = self.store.client.xrange(self.store.keys.events, count=1)
        if first and stream_id(codec.text(first[0][0])) > stream_id(position):
            log.warning("the event stream was trimmed past the user log writer's position %s: "
                        "user log events may be missing (raise BROKER_EVENTS_MAXLEN)", position)
