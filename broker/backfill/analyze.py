"""The words `fetchwork q -analyze ID` adds about backfill: the reserved job's machine
and expected start, or which job holds the reservation this one may not delay."""

from __future__ import annotations

import datetime

from ..policy.showq import clock_text, date_text
from .plan import Reservation


def reservation_lines(job_id: str, reservation: Reservation | None, now: float,
                      bypass_count: int = 0, tz: datetime.tzinfo | None = None) -> list[str]:
    """Sentences on the pool's reservation as it concerns job `job_id`."""
    if reservation is None:
        return []
    when = (f"expected to start {date_text(reservation.start_at, tz)}, in "
            f"{clock_text(reservation.start_at - now)}")
    if reservation.job_id != job_id:
        return [f"Job {reservation.job_id} holds the reservation on {reservation.machine} "
                f"({when}); jobs below it start only where they do not delay it."]
    kind = "all of machine" if reservation.exclusive else "machine"
    lines = [f"Reserved: {kind} {reservation.machine}, {when}, when its running jobs "
             "end by their walltimes."]
    window = reservation.window
    lines.append(f"Backfill window there: {window.free.cpus:g} CPUs for "
                 f"{clock_text(window.seconds)} (from {date_text(reservation.computed_at, tz)}).")
    if bypass_count:
        jobs = "job has" if bypass_count == 1 else "jobs have"
        lines.append(f"{bypass_count} lower {jobs} started ahead of it (BypassCount).")
    return lines
