"""The slot lifecycle: HTCondor's State and Activity, and the edges between them.

A slot is always in one (State, Activity) pair. `transition` checks that the
edge exists and returns the new status stamped with the time it was entered;
the caller passes `now` in (wall-clock seconds, as `EnteredCurrentState` is
published). Only the states and activities fetched work can reach are modelled
(no Matched, Backfill, Drained, Benchmarking or Retiring).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from fetchwork.errors import SlotStateError


class State(enum.Enum):
    OWNER = "Owner"
    UNCLAIMED = "Unclaimed"
    CLAIMED = "Claimed"
    PREEMPTING = "Preempting"


class Activity(enum.Enum):
    IDLE = "Idle"
    BUSY = "Busy"
    SUSPENDED = "Suspended"
    VACATING = "Vacating"
    KILLING = "Killing"


S, A = State, Activity

# Every edge a slot may take. Same-state activity changes keep
# EnteredCurrentState and only move EnteredCurrentActivity.
EDGES: frozenset[tuple[tuple[State, Activity], tuple[State, Activity]]] = frozenset({
    # START became false (HTCondor's IS_OWNER: START =?= false): the machine is unavailable.
    ((S.UNCLAIMED, A.IDLE), (S.OWNER, A.IDLE)),
    # START is no longer false: the slot may fetch again.
    ((S.OWNER, A.IDLE), (S.UNCLAIMED, A.IDLE)),
    # A fetched job was accepted: a claim is created.
    ((S.UNCLAIMED, A.IDLE), (S.CLAIMED, A.IDLE)),
    # The starter of the claim's job was spawned.
    ((S.CLAIMED, A.IDLE), (S.CLAIMED, A.BUSY)),
    # The job ended; the claim stays and fetches again at once.
    ((S.CLAIMED, A.BUSY), (S.CLAIMED, A.IDLE)),
    ((S.CLAIMED, A.SUSPENDED), (S.CLAIMED, A.IDLE)),
    # The starter suspended / resumed the job.
    ((S.CLAIMED, A.BUSY), (S.CLAIMED, A.SUSPENDED)),
    ((S.CLAIMED, A.SUSPENDED), (S.CLAIMED, A.BUSY)),
    # The claim is evicted (no more work, a higher-ranked job, shutdown): vacate gracefully.
    ((S.CLAIMED, A.IDLE), (S.PREEMPTING, A.VACATING)),
    ((S.CLAIMED, A.BUSY), (S.PREEMPTING, A.VACATING)),
    ((S.CLAIMED, A.SUSPENDED), (S.PREEMPTING, A.VACATING)),
    # Fast shutdown: kill at once.
    ((S.CLAIMED, A.IDLE), (S.PREEMPTING, A.KILLING)),
    ((S.CLAIMED, A.BUSY), (S.PREEMPTING, A.KILLING)),
    ((S.CLAIMED, A.SUSPENDED), (S.PREEMPTING, A.KILLING)),
    # Vacating took longer than MachineMaxVacateTime: kill.
    ((S.PREEMPTING, A.VACATING), (S.PREEMPTING, A.KILLING)),
    # The starter is gone and a preempting claim waits: it takes the slot.
    ((S.PREEMPTING, A.VACATING), (S.CLAIMED, A.IDLE)),
    ((S.PREEMPTING, A.KILLING), (S.CLAIMED, A.IDLE)),
    # The starter is gone and no claim waits: the slot goes to Owner, as in HTCondor.
    ((S.PREEMPTING, A.VACATING), (S.OWNER, A.IDLE)),
    ((S.PREEMPTING, A.KILLING), (S.OWNER, A.IDLE)),
})


@dataclass(frozen=True)
class SlotStatus:
    """Where a slot is, and since when (wall-clock seconds)."""

    state: State = State.OWNER
    activity: Activity = Activity.IDLE
    entered_state_at: float = 0.0
    entered_activity_at: float = 0.0

    @property
    def pair(self) -> tuple[State, Activity]:
        return (self.state, self.activity)

    def __str__(self) -> str:
        return f"{self.state.value}/{self.activity.value}"


def can_transition(status: SlotStatus, state: State, activity: Activity) -> bool:
    return (status.pair, (state, activity)) in EDGES


def transition(status: SlotStatus, state: State, activity: Activity, now: float) -> SlotStatus:
    """The status after taking the edge to (state, activity); SlotStateError if there is none."""
    if not can_transition(status, state, activity):
        raise SlotStateError(f"no transition from {status} to {state.value}/{activity.value}")
    if state is status.state:
        return replace(status, activity=activity, entered_activity_at=now)
    return SlotStatus(state, activity, now, now)


def initial_status(now: float) -> SlotStatus:
    """A new slot starts in Owner/Idle, as HTCondor's do, and leaves it once START allows."""
    return SlotStatus(State.OWNER, Activity.IDLE, now, now)
