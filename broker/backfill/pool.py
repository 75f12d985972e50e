"""The pool as backfill sees it: machines from slot ads, running and waiting jobs from
job ads (to_dict-style mappings, names in any case), as pure functions.

A machine is the part of a slot's Name after '@' (what a running job's
RemoteHost says too). Its total is what its slots offer: the configured size
of each partitionable or static slot (`TotalSlotCpus`, `TotalSlotMemory`,
`TotalSlotDisk`, else the slot's `Cpus`, `Memory`, `Disk`); dynamic slots
are parts of a partitionable one and add nothing. A dimension no slot
states is unbounded. A job asks `RequestCpus` (default 1), `RequestMemory`
(MB) and `RequestDisk` (KB) (default 0), for its `AllowedJobDuration` (else
DEFAULT_JOB_WALLTIME); `Exclusive = true` takes a whole machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from fetchwork.broker.store.jobads import walltime_of
from fetchwork.config.resources import Resources

from .plan import Machine, Running, Waiting

# Slot ad attributes that say the slot is busy or small right now: an ideal slot
# (the slot as configured, nothing running) leaves them out.
_NOW_ONLY = {"fetchworkrunningjobs": 0, "fetchworkexclusive": False}


def attr(ad: Mapping[str, Any], name: str) -> Any:
    """Attribute `name` of a mapping ad, whatever the case of its key."""
    if name in ad:
        return ad[name]
    low = name.lower()
    return next((value for key, value in ad.items() if key.lower() == low), None)


def number(ad: Mapping[str, Any], name: str) -> float | None:
    value = attr(ad, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def machine_of(slot_or_host: str) -> str:
    """The machine of a slot Name or RemoteHost: the part after '@' (all of it without)."""
    return slot_or_host.split("@", 1)[-1]


def is_dynamic(slot: Mapping[str, Any]) -> bool:
    return attr(slot, "DynamicSlot") is True or attr(slot, "SlotType") == "Dynamic"


def _size(slot: Mapping[str, Any], total: str, now: str) -> float | None:
    configured = number(slot, total)
    return configured if configured is not None else number(slot, now)


def machines_of(slots: Iterable[Mapping[str, Any]]) -> list[Machine]:
    """The machines behind the slot ads, with the totals their slots offer (a machine
    seen only through dynamic slots: its TotalCpus, TotalMemory, TotalDisk)."""
    sizes: dict[str, list[float | None]] = {}
    seen_dynamic: dict[str, Mapping[str, Any]] = {}
    for slot in slots:
        name = attr(slot, "Name")
        if not isinstance(name, str):
            continue
        if is_dynamic(slot):
            seen_dynamic[machine_of(name)] = slot
            continue
        size = [_size(slot, "TotalSlotCpus", "Cpus"), _size(slot, "TotalSlotMemory", "Memory"),
                _size(slot, "TotalSlotDisk", "Disk")]
        kept = sizes.setdefault(machine_of(name), [0.0, 0.0, 0.0])
        for index, amount in enumerate(size):
            now_kept = kept[index]
            kept[index] = None if amount is None or now_kept is None else now_kept + amount
    for machine, slot in seen_dynamic.items():
        if machine not in sizes:
            sizes[machine] = [number(slot, "TotalCpus"), number(slot, "TotalMemory"),
                              number(slot, "TotalDisk")]
    return [Machine(name, Resources(*(math.inf if amount is None else amount
                                      for amount in size)))
            for name, size in sorted(sizes.items())]


def ideal_slot(slot: Mapping[str, Any]) -> dict[str, Any]:
    """The slot ad as configured with nothing running: what a job's Requirements
    are matched against to know whether the machine could ever take it."""
    ideal = {key: value for key, value in slot.items() if key.lower() not in _NOW_ONLY}
    for total, now in (("TotalSlotCpus", "Cpus"), ("TotalSlotMemory", "Memory"),
                       ("TotalSlotDisk", "Disk")):
        configured = number(slot, total)
        if configured is not None:
            ideal = {key: value for key, value in ideal.items() if key.lower() != now.lower()}
            ideal[now] = int(configured) if configured.is_integer() else configured
    return ideal


def ideal_slots_by_machine(slots: Iterable[Mapping[str, Any]]
                           ) -> dict[str, list[dict[str, Any]]]:
    """Ideal ads of the partitionable and static slots, by machine."""
    out: dict[str, list[dict[str, Any]]] = {}
    for slot in slots:
        name = attr(slot, "Name")
        if isinstance(name, str) and not is_dynamic(slot):
            out.setdefault(machine_of(name), []).append(ideal_slot(slot))
    return out


def needs_of(job: Mapping[str, Any]) -> Resources[float]:
    cpus = number(job, "RequestCpus")
    return Resources(max(1.0, cpus) if cpus is not None else 1.0,
                     max(0.0, number(job, "RequestMemory") or 0.0),
                     max(0.0, number(job, "RequestDisk") or 0.0))


def is_exclusive(job: Mapping[str, Any]) -> bool:
    return attr(job, "Exclusive") is True


def waiting_of(job_id: str, job: Mapping[str, Any], order: float, default_walltime_s: float,
               machines: frozenset[str] | None = None) -> Waiting:
    """An idle job at idle score `order`."""
    return Waiting(job_id, order, needs_of(job), walltime_of(job, default_walltime_s),
                   is_exclusive(job), machines)


def started_at(job: Mapping[str, Any]) -> float | None:
    """When the current run started: JobCurrentStartDate, else when it was claimed."""
    return (number(job, "JobCurrentStartDate") or number(job, "EnteredCurrentStatus")
            or number(job, "JobStartDate"))


def running_of(job_id: str, job: Mapping[str, Any], default_walltime_s: float,
               now: float) -> Running | None:
    """A running job on its machine until its walltime ends; None without a RemoteHost."""
    host = attr(job, "RemoteHost")
    if not isinstance(host, str) or not host:
        return None
    start = started_at(job)
    ends_at = (start if start is not None else now) + walltime_of(job, default_walltime_s)
    return Running(job_id, machine_of(host), needs_of(job), ends_at, is_exclusive(job))
