"""Reservations and backfill windows, as pure functions of the pool and `now`.

A job runs within one machine, so a reservation is one machine and a start
time: the earliest moment at which the machine's resources, less those of
the jobs still running there by their walltimes, cover what the waiting job
asks. An Exclusive job asks for the whole machine and waits until every job
there has ended, so its machine is the smallest drain: the one whose running
jobs end soonest.

The backfill window is what the reserved machine has free now, until the
reservation starts. The text's nodes are CPUs of one machine here: four
2-CPU nodes idle for 15 minutes are 8 free CPUs, 900 s before the start, and
an 8-CPU job of 10 minutes fits that window exactly. A lower job may start
on a slot when it does not delay the reservation: on another machine; on the
reserved machine within the window (it ends by its walltime before the
start); or on what the reserved machine will still have spare once the
reserved job has taken its part (never beside an Exclusive reservation).

Times are Unix seconds; memory is in MB and disk in KB, as in the ads.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fetchwork.config.resources import Resources

# How many idle jobs, best first, a pass looks through for the one to reserve for.
DEPTH = 1000


NOTHING = Resources(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Machine:
    """An execute machine: its totals, from its slot ads."""

    name: str
    total: Resources[float]


@dataclass(frozen=True)
class Running:
    """A job running on `machine` until `ends_at` (its start plus its walltime)."""

    job_id: str
    machine: str
    uses: Resources[float]
    ends_at: float
    exclusive: bool = False


@dataclass(frozen=True)
class Waiting:
    """An idle job: `order` is its place in the idle set (lower goes first);
    `machines` are those its Requirements accept (None: any)."""

    job_id: str
    order: float
    needs: Resources[float]
    walltime_s: float
    exclusive: bool = False
    machines: frozenset[str] | None = None


@dataclass(frozen=True)
class Window:
    """Free resources for `seconds`: a job fits when it asks no more and ends in time."""

    free: Resources[float]
    seconds: float

    def fits(self, needs: Resources[float], walltime_s: float) -> bool:
        return self.free.covers(needs) and walltime_s <= self.seconds


@dataclass(frozen=True)
class Reservation:
    """Machine `machine` is kept for job `job_id` from `start_at` on."""

    job_id: str
    order: float
    machine: str
    start_at: float
    # What the job takes at its start: the whole machine when exclusive.
    needs: Resources[float]
    # The machine's free resources when computed: the window's width.
    free_now: Resources[float]
    # The machine's free resources at start_at, before the job takes its part.
    free_at_start: Resources[float]
    computed_at: float
    exclusive: bool = False

    @property
    def window(self) -> Window:
        return Window(self.free_now, max(0.0, self.start_at - self.computed_at))

    @property
    def spare(self) -> Resources[float]:
        """What the machine has at start_at beyond the reserved job's part."""
        return NOTHING if self.exclusive else self.free_at_start - self.needs


@dataclass(frozen=True)
class Plan:
    """A pass's outcome: the reservation (or None), and the idle jobs before the
    reserved one that can start at once (their starts are no bypass)."""

    reservation: Reservation | None
    ahead: tuple[str, ...] = ()
    # Idle jobs passed over: no known machine can ever take them.
    unplaceable: tuple[str, ...] = field(default=())


def _on(machine: str, running: Iterable[Running]) -> list[Running]:
    return [job for job in running if job.machine == machine]


def _free(machine: Machine, counted: Iterable[Running]) -> Resources[float]:
    free = machine.total
    for job in counted:
        if job.exclusive:
            return NOTHING
        free = free - job.uses
    return free


def free_now(machine: Machine, running: Iterable[Running]) -> Resources[float]:
    """What `machine` has free now: its total less every job running there."""
    return _free(machine, _on(machine.name, running))


def free_after(machine: Machine, running: Iterable[Running], at: float,
               now: float) -> Resources[float]:
    """What `machine` has free once the jobs ending by `at` have ended (a job already
    past its walltime counts as ending now)."""
    return _free(machine, [job for job in _on(machine.name, running)
                           if max(job.ends_at, now) > at])


def needs_on(job: Waiting, machine: Machine) -> Resources[float]:
    """What the job takes of `machine`: all of it when exclusive."""
    return machine.total if job.exclusive else job.needs


def could_run(job: Waiting, machine: Machine) -> bool:
    """Whether the job could ever run on `machine` (its Requirements and its size)."""
    if job.machines is not None and machine.name not in job.machines:
        return False
    return machine.total.covers(job.needs)


def fits_now(job: Waiting, machine: Machine, running: Sequence[Running]) -> bool:
    return free_now(machine, running).covers(needs_on(job, machine))


def earliest_start(job: Waiting, machine: Machine, running: Sequence[Running],
                   now: float) -> tuple[float, Resources[float]] | None:
    """The first time the job's part of `machine` is free, and what is free then;
    None when the machine is too small for it."""
    if not could_run(job, machine):
        return None
    needs = needs_on(job, machine)
    if fits_now(job, machine, running):
        return now, free_now(machine, running)
    for at in sorted({max(one.ends_at, now) for one in _on(machine.name, running)}):
        free = free_after(machine, running, at, now)
        if free.covers(needs):
            return at, free
    return None


def _drain_key(item: tuple[float, Machine, Resources[float]]) -> tuple[float, float, str]:
    at, machine, _free = item
    return at, -machine.total.memory_mb, machine.name


def plan(waiting: Sequence[Waiting], machines: Sequence[Machine], running: Sequence[Running],
         now: float, depth: int = DEPTH) -> Plan:
    """The reservation for the best idle job that cannot start now. `waiting` is in
    priority order; jobs that fit somewhere now are assumed to start there (they go
    before it); jobs no machine can ever take are passed over."""
    started = list(running)
    ahead: list[str] = []
    passed: list[str] = []
    for job in waiting[:depth]:
        eligible = [machine for machine in machines if could_run(job, machine)]
        if not eligible:
            passed.append(job.job_id)
            continue
        room = [machine for machine in eligible if fits_now(job, machine, started)]
        if room:
            chosen = min(room, key=lambda machine: (-machine.total.memory_mb, machine.name))
            started.append(Running(job.job_id, chosen.name, needs_on(job, chosen),
                                   now + job.walltime_s, job.exclusive))
            ahead.append(job.job_id)
            continue
        starts = [(found[0], machine, found[1]) for machine in eligible
                  if (found := earliest_start(job, machine, started, now)) is not None]
        at, machine, free = min(starts, key=_drain_key)
        reservation = Reservation(job.job_id, job.order, machine.name, at,
                                  needs_on(job, machine),
                                  free_now(machine, started), free, now,
                                  job.exclusive)
        return Plan(reservation, tuple(ahead), tuple(passed))
    return Plan(None, tuple(ahead), tuple(passed))


class Verdict(enum.Enum):
    """Whether a candidate job may go to a slot while a reservation stands."""

    AHEAD = "ahead"  # no reservation, or the job goes before the reserved one
    ELSEWHERE = "elsewhere"  # a lower job on another machine
    WINDOW = "window"  # a lower job that ends before the reservation starts
    SPARE = "spare"  # a lower job on what the reservation does not need
    HELD_BACK = "held back"  # it would delay the reservation (or BACKFILL is off)

    @property
    def allowed(self) -> bool:
        return self is not Verdict.HELD_BACK

    @property
    def bypass(self) -> bool:
        """Whether starting the job starts a lower job ahead of the reserved one."""
        return self in (Verdict.ELSEWHERE, Verdict.WINDOW, Verdict.SPARE)


def decide(job: Waiting, machine: str, reservation: Reservation | None, now: float,
           backfill: bool = True) -> Verdict:
    """May `job` go to a slot of `machine` now without delaying `reservation`? With
    `backfill` off, no lower job starts anywhere while the reservation stands."""
    if reservation is None or job.job_id == reservation.job_id or job.order < reservation.order:
        return Verdict.AHEAD
    if not backfill:
        return Verdict.HELD_BACK
    if machine != reservation.machine:
        return Verdict.ELSEWHERE
    left = Window(reservation.window.free, reservation.start_at - now)
    if left.fits(job.needs, job.walltime_s):
        return Verdict.WINDOW
    if not job.exclusive and reservation.spare.covers(job.needs):
        return Verdict.SPARE
    return Verdict.HELD_BACK


# -- the stored form -----------------------------------------------------------

def _resources(values: Any) -> Resources[float]:
    cpus, memory, disk = (list(values) + [0.0, 0.0, 0.0])[:3]
    return Resources(float(cpus), float(memory), float(disk))


def _listed(amount: Resources[float]) -> list[float]:
    return [amount.cpus, amount.memory_mb, amount.disk_kb]


def to_record(reservation: Reservation) -> dict[str, Any]:
    """The reservation as plain values (what the leader stores, msgpack-packed)."""
    return {"job": reservation.job_id, "order": reservation.order,
            "machine": reservation.machine, "start_at": reservation.start_at,
            "needs": _listed(reservation.needs), "free_now": _listed(reservation.free_now),
            "free_at_start": _listed(reservation.free_at_start),
            "computed_at": reservation.computed_at, "exclusive": reservation.exclusive}


def from_record(record: Mapping[str, Any] | None) -> Reservation | None:
    """A reservation from its stored form; None when absent or unreadable."""
    if not isinstance(record, Mapping):
        return None
    try:
        return Reservation(str(record["job"]), float(record["order"]), str(record["machine"]),
                           float(record["start_at"]), _resources(record["needs"]),
                           _resources(record["free_now"]), _resources(record["free_at_start"]),
                           float(record["computed_at"]), bool(record.get("exclusive")))
    except (KeyError, TypeError, ValueError):
        return None
