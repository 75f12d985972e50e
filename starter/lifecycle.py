"""The starter's job lifecycle as pure decisions: phase, request, time -> next phase and effects.

Phases (each edge is one branch of `handle`):

    PREPARING -> RUNNING      the prepare hook succeeded and the job was spawned
    PREPARING -> PREPARING    a stop request arrives: remembered, the job is never spawned
    RUNNING   -> SUSPENDED    suspend: SIGSTOP to the tree
    SUSPENDED -> RUNNING      continue: SIGCONT to the tree
    RUNNING|SUSPENDED -> VACATING   vacate/remove/hold: KillSig to the job, SIGKILL at a deadline
    RUNNING|SUSPENDED|VACATING -> VACATING  kill: SIGKILL to the tree now
    any       -> DONE         the job's main process exited (or never started)

Effects are words the process owner carries out: `stop`, `cont`, `soft_kill`,
`hard_kill`. Requests are the control words of the starter protocol.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from fetchwork.config.protocol import (
    CONTINUE,
    CONTROL_WORDS,
    EVICT,
    EXIT,
    HOLD,
    KILL,
    REMOVE,
    SUSPEND,
    VACATE,
)

# How a stop request reports the job's end to the exit hook.
_HOW = {VACATE: EVICT, KILL: EVICT, REMOVE: REMOVE, HOLD: HOLD}
# A later request may turn an eviction into a removal or hold (the job must
# not be requeued), never the other way round.
_WEIGHT = {None: 0, EVICT: 1, HOLD: 2, REMOVE: 3}

STOP, CONT, SOFT_KILL, HARD_KILL = "stop", "cont", "soft_kill", "hard_kill"


class Phase(enum.Enum):
    PREPARING = "Preparing"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    VACATING = "Vacating"
    DONE = "Done"


@dataclass(frozen=True)
class Status:
    """Where the job is, how it is ending (None: not asked to end) and the SIGKILL deadline."""

    phase: Phase = Phase.PREPARING
    how: str | None = None
    kill_at: float | None = None


@dataclass(frozen=True)
class Step:
    status: Status
    effects: tuple[str, ...] = ()


def _stronger(current: str | None, new: str) -> str:
    return new if _WEIGHT[new] > _WEIGHT[current] else current  # type: ignore[return-value]


def handle(status: Status, request: str, now: float, vacate_time_s: float) -> Step:
    """The effect of one control request."""
    if request not in CONTROL_WORDS:
        raise ValueError(f"unknown request {request!r}")
    phase = status.phase
    if phase is Phase.DONE:
        return Step(status)
    if request == SUSPEND:
        if phase is Phase.RUNNING:  # RUNNING -> SUSPENDED
            return Step(replace(status, phase=Phase.SUSPENDED), (STOP,))
        return Step(status)
    if request == CONTINUE:
        if phase is Phase.SUSPENDED:  # SUSPENDED -> RUNNING
            return Step(replace(status, phase=Phase.RUNNING), (CONT,))
        return Step(status)
    how = _stronger(status.how, _HOW[request])
    if phase is Phase.PREPARING:  # PREPARING -> PREPARING, never spawned
        return Step(replace(status, how=how))
    if request == KILL:  # RUNNING|SUSPENDED|VACATING -> VACATING, SIGKILL now
        return Step(replace(status, phase=Phase.VACATING, how=how, kill_at=None), (HARD_KILL,))
    if phase is Phase.VACATING:
        # Already asked to leave: only the reason may change; the deadline stays.
        return Step(replace(status, how=how))
    # RUNNING|SUSPENDED -> VACATING. As HTCondor, a suspended job is continued
    # after its KillSig so that it can act on it.
    effects = (SOFT_KILL, CONT) if phase is Phase.SUSPENDED else (SOFT_KILL,)
    return Step(Status(Phase.VACATING, how, now + vacate_time_s), effects)


def tick(status: Status, now: float) -> Step:
    """The timer: SIGKILL a vacating job whose MachineMaxVacateTime has passed."""
    if status.phase is Phase.VACATING and status.kill_at is not None and now >= status.kill_at:
        return Step(replace(status, kill_at=None), (HARD_KILL,))
    return Step(status)


def started(status: Status) -> Status:
    """PREPARING -> RUNNING once the job is spawned."""
    if status.phase is not Phase.PREPARING:
        raise ValueError(f"cannot start a job in phase {status.phase.name}")
    return replace(status, phase=Phase.RUNNING)


def finished(status: Status) -> Status:
    """any -> DONE; a job that ends without being asked to ends with `exit`."""
    return replace(status, phase=Phase.DONE, how=status.how or EXIT, kill_at=None)


def next_deadline(status: Status) -> float | None:
    """When `tick` next has work to do, or None."""
    return status.kill_at if status.phase is Phase.VACATING else None
