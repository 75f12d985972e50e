"""Whether any idle job waits behind a busy pool: the backfill pass's cheap question.

A reservation is for the best idle job that no slot has room for. While the
queue flows (each claim takes the job at the head of the idle set, as in a
pool of equal jobs on busy slots) no job waits behind another: the head is
taken before the next pass and nothing is passed over, so a pass would only
compute a reservation for a job about to start anyway, at the cost of
reading the slots, the running jobs and the idle head every pass. The leader
therefore looks first at the first `WINDOW` members of the idle set (one
ZRANGE), and computes the reservation only when some job is seen waiting:

- the head of the idle set has stayed the head for `settle_s` (SETTLE_S: a
  job no claim took for that long, the one a reservation is for, when it is
  alone in the queue too);
- or a claim passed a job over: one of the jobs behind it in the previous
  look started while it was named by no transition (neither started,
  removed nor held) since.

Otherwise no reservation stands (a job that starts ahead of none bypasses
none). A job of a pool that flows is thus reserved for `settle_s` after it
stops flowing. HTCondor's negotiator likewise computes reservations only for the
jobs its cycle could not match, once a cycle.

While no reservation stands and the idle head is not empty, the leader
reads no transition at all (leader.py): the jobs named between two looks are
then those that left the head, and the started ones among those that left
from behind a job still there (`left_behind`) are told by their state, read
only when there is such a job. A job still there that a transition named
meanwhile (a claim given back) then counts as passed over: a pass computes
the reservation once more than needed, nothing else.

`look` is a pure function of what the two looks saw, the transitions between
them and `now`; so is `left_behind`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

# Idle jobs read, best first, by the cheap question.
WINDOW = 16
# Seconds the head of the idle set stays the head before it is known to wait (the
# leader takes BACKFILL_MIN_INTERVAL when that is longer): long enough that the
# jobs of a busy pool that flows, one claim a slot's job apart, are never taken
# for waiting ones on a loaded machine; short beside HTCondor's negotiation cycle.
SETTLE_S = 1.0


@dataclass(frozen=True)
class Look:
    """The first idle jobs (best first) as one pass saw them, and since when (monotonic
    seconds) the head was the head."""

    ids: tuple[str, ...] = ()
    head_since: float = 0.0

    @property
    def head(self) -> str | None:
        return self.ids[0] if self.ids else None


def look(previous: Look, ids: Sequence[str], started: Collection[str],
         named: Collection[str], now: float, settle_s: float) -> tuple[Look, bool]:
    """The new look at the idle head `ids`, and whether a job waits behind a busy pool.

    `started` are the jobs that started since the previous look, `named` every job a
    transition named since (started ones included)."""
    head = ids[0] if ids else None
    since = previous.head_since if head is not None and head == previous.head else now
    current = Look(tuple(ids), since)
    if head is None:
        return current, False
    if now - since >= settle_s:
        return current, True
    return current, passed_over(previous.ids, started, named)


def passed_over(before: Sequence[str], started: Collection[str],
                named: Collection[str]) -> bool:
    """Whether some job of `before` (best first) started while one ahead of it was
    named by no transition since (that one was passed over)."""
    waiting_ahead = False
    for job_id in before:
        if job_id not in named:
            waiting_ahead = True
        elif waiting_ahead and job_id in started:
            return True
    return False


def left_behind(before: Sequence[str], ids: Sequence[str]) -> list[str]:
    """The jobs of the earlier look `before` (best first) gone from the idle head `ids`
    while a job ahead of them is still in it: a claim may have passed that one over."""
    present = set(ids)
    found, ahead = [], False
    for job_id in before:
        if job_id in present:
            ahead = True
        elif ahead:
            found.append(job_id)
    return found
