"""The waiting claims of one process, woken by a job's IDLE event one look at a time.

Every claim that waits for work blocks on the event stream (claimer.py), so
one IDLE event wakes all the waiting claims of a process: a startd's idle
slots each look for the one new job at once, and all but one look in vain,
taking the machine's cores (and the process's interpreter) from the one
whose job is about to start. The room lets the claims of one client (one
process's broker connection) share what they learn: a woken claim looks
while its wake-up names more new jobs not yet taken here than there are
looks under way; otherwise it waits for those looks to end, and goes back
to waiting for work without looking when they took every job its wake-up
named. A look that took nothing, or took another job, leaves the named jobs
open, and the next woken claim looks.

Nothing is left unclaimed while a claim waits: a claim skips its look only
when each job named by the IDLE events it read (each event by its own id: a
job requeued later is named again by a new one) was claimed by a look of
this process; a wake-up that read as many entries as one read brings (more
may follow) or an entry naming a batch of jobs always looks, and so does
a claim whose wait for the looks under way outlasts LOOK_WAIT_S (an
activation filter may hold a look for seconds). Other processes' claims
are woken by their own reads, as before.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

# Longest wait for the looks under way before a woken claim looks anyway.
LOOK_WAIT_S = 0.25
# IDLE events and claimed jobs remembered (the newest); one forgotten only makes a
# later wake-up look, as it would without the room.
REMEMBERED = 4096

# An IDLE event of one job: (the stream entry's id, the job's id).
Named = tuple[str, str]


class WakeRoom:
    """What the woken claims of one process know of each other's looks."""

    def __init__(self, look_wait_s: float = LOOK_WAIT_S, remembered: int = REMEMBERED):
        self.look_wait_s = look_wait_s
        self.remembered = remembered
        self._cond = threading.Condition()
        # Looks under way that a wake-up started.
        self._looking = 0
        # Each job's newest IDLE event read here, with the number of the reading that
        # first brought it (a count of new events), and the events whose job a look took.
        self._latest: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._readings = 0
        self._taken: OrderedDict[Named, None] = OrderedDict()

    def woken(self, named: list[Named], complete: bool, deadline: float) -> int | None:
        """Whether a claim woken by the IDLE events `named` (in stream order; `complete`:
        its read brought all there was) looks now: a number for `looked`, which the
        claim calls when its look ends; None when every named job was taken here (wait
        again). Returns by `deadline` (monotonic) at the latest."""
        mine = dict((job, event) for event, job in named)
        with self._cond:
            for job, event in mine.items():
                known = self._latest.get(job)
                if known is None or known[0] != event:
                    self._readings += 1
                    self._latest[job] = (event, self._readings)
                self._latest.move_to_end(job)
            while len(self._latest) > self.remembered:
                self._latest.popitem(last=False)
            give_up = min(deadline, time.monotonic() + self.look_wait_s)
            while True:
                left = sum(1 for job, event in mine.items() if (event, job) not in self._taken)
                if complete and left == 0:
                    return None
                remaining = give_up - time.monotonic()
                if not complete or left > self._looking or remaining <= 0:
                    self._looking += 1
                    return self._readings
                self._cond.wait(remaining)

    def looked(self, look: int, job_id: str | None) -> None:
        """The look numbered `look` (from `woken`) has ended, having claimed `job_id` (or
        nothing). The job's IDLE event counts as taken only when it was read before the
        look began: one read since is a later requeue of the job, still to be claimed."""
        with self._cond:
            self._looking = max(0, self._looking - 1)
            known = self._latest.get(job_id) if job_id is not None else None
            if job_id is not None and known is not None and known[1] <= look:
                self._taken[(known[0], job_id)] = None
                while len(self._taken) > self.remembered:
                    self._taken.popitem(last=False)
            self._cond.notify_all()
