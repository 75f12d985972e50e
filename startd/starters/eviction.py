"""The deadlines of one slot's eviction, as a pure step function (monotonic seconds).

An evicted claim's job is first told to vacate; when MachineMaxVacateTime is
over, the slot turns from Vacating to Killing and the job is told to die; when
KILLING_TIMEOUT (or the fast shutdown grace) is over too, the starter gets
SIGKILL. `step(state, event, now)` returns the new deadlines and the effects
the caller carries out; it sends nothing and moves no slot itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class Deadlines:
    """When Vacating turns into Killing, and when the starter gets SIGKILL."""

    vacate_at: float | None = None
    kill_at: float | None = None

    def next_at(self) -> float | None:
        """The earliest deadline, or None."""
        times = [t for t in (self.vacate_at, self.kill_at) if t is not None]
        return min(times) if times else None


class Effect(enum.Enum):
    SEND_VACATE = "send vacate"          # tell the starter to vacate its job
    SEND_KILL = "send kill"              # tell the starter to kill its job
    VACATE_TIMED_OUT = "vacate timed out"  # the slot turns Preempting/Killing
    KILL_STARTER = "kill starter"        # SIGKILL the starter itself


@dataclass(frozen=True)
class Vacate:
    """The slot entered Preempting/Vacating with a starter."""

    max_vacate_s: float


@dataclass(frozen=True)
class Kill:
    """The slot entered Preempting/Killing with a starter."""

    killing_timeout_s: float


@dataclass(frozen=True)
class Tick:
    """Time passed; `vacating`: the slot is still Preempting/Vacating."""

    has_starter: bool
    vacating: bool
    killing_timeout_s: float


@dataclass(frozen=True)
class Released:
    """The claim is gone (its starter exited); no deadline is left."""


Event = Vacate | Kill | Tick | Released


def step(state: Deadlines, event: Event, now: float) -> tuple[Deadlines, tuple[Effect, ...]]:
    """The new deadlines and the effects of `event` at `now`."""
    if isinstance(event, Vacate):
        return Deadlines(vacate_at=now + event.max_vacate_s, kill_at=state.kill_at), (
            Effect.SEND_VACATE,)
    if isinstance(event, Kill):
        return Deadlines(kill_at=now + event.killing_timeout_s), (Effect.SEND_KILL,)
    if isinstance(event, Released):
        return Deadlines(), ()
    return _tick(state, event, now)


def _tick(state: Deadlines, event: Tick, now: float) -> tuple[Deadlines, tuple[Effect, ...]]:
    effects: list[Effect] = []
    vacate_at, kill_at = state.vacate_at, state.kill_at
    if vacate_at is not None and now >= vacate_at:
        vacate_at = None
        if event.has_starter and event.vacating:
            effects += [Effect.VACATE_TIMED_OUT, Effect.SEND_KILL]
            kill_at = now + event.killing_timeout_s
    if kill_at is not None and now >= kill_at:
        kill_at = None
        if event.has_starter:
            effects.append(Effect.KILL_STARTER)
    return Deadlines(vacate_at=vacate_at, kill_at=kill_at), tuple(effects)
