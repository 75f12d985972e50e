"""The startd's slots by kind: static, partitionable and the dynamic slots carved from them.

`Carving` knows each configured slot's size (`SlotSpec`), keeps a
`Partition` per partitionable slot, makes a dynamic `Slot` for a job a
p-slot accepted and drops it when its claim ends. It adds to every slot ad
what the match rule and the broker read (CONTRACT of the slot ad): the
slot's free and total resources, its kind, the machine's totals and `Mips`,
`FetchworkRunningJobs` and `FetchworkExclusive`; and it says when a slot
may fetch (a p-slot with nothing free, or any slot while an exclusive job
runs, does not).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Hashable, Iterable, MutableMapping, Sequence
from typing import Any

import classad2

from fetchwork.config.loader import Config
from fetchwork.config.matching import EXCLUSIVE_RUNNING, RUNNING_JOBS, requested
from fetchwork.config.resources import Resources
from fetchwork.startd.settings import StartdSettings
from fetchwork.startd.states import Activity, SlotStatus, State

from .mips import mips_of
from .partitionable import Carve, Partition, affinity, core_ranges
from .slot import Slot
from .slotad import MachineFacts
from .slottypes import SlotSpec, even_split, machine_resources, resolve

log = logging.getLogger(__name__)

STATIC, PARTITIONABLE, DYNAMIC = "Static", "Partitionable", "Dynamic"
# The name the next dynamic slot of a p-slot will have (a claim may record it as RemoteHost).
NEXT_SLOT_ATTR = "FetchworkDynamicSlotName"
# The cores a job is pinned to (ASSIGN_CPU_AFFINITY), as HTCondor's SLOT<N>_CPU_AFFINITY lists them.
AFFINITY_ATTR = "CpuAffinity"


def usable_cores() -> list[int]:
    """The cores this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def dynamic_name(slot_id: int, index: int, machine: str) -> str:
    return f"slot{slot_id}_{index}@{machine}"


def index_in(remote_host: Any, slot_id: int) -> int | None:
    """The d-slot number in a RemoteHost such as `slot1_3@host` for p-slot 1, else None."""
    if not isinstance(remote_host, str):
        return None
    match = re.match(rf"slot{slot_id}_(\d+)@", remote_host)
    return int(match.group(1)) if match else None


class Carving:
    """Slot sizes, partitions and dynamic slots of one startd."""

    def __init__(self, specs: Sequence[SlotSpec], machine: Resources[int], mips: int,
                 assign_affinity: bool, startd_name: str, cores: Sequence[int] | None = None):
        self.startd_name = startd_name
        self.specs = {spec.slot_id: spec for spec in specs}
        self.machine = machine
        self.mips = mips
        self.assign_affinity = assign_affinity
        self.usable = list(cores) if cores is not None else usable_cores()
        ranges = core_ranges(spec.size.cpus for spec in specs)
        self.cores = {spec.slot_id: ranges[n] for n, spec in enumerate(specs)}
        self.partitions = {spec.slot_id: Partition(spec.size, self.cores[spec.slot_id])
                           for spec in specs if spec.partitionable}
        self._was_exclusive = False

    # -- what the machine runs ----------------------------------------------

    @staticmethod
    def running_jobs(slots: Iterable[Slot]) -> int:
        """Jobs running or starting on the startd (a starter exists for them, or their
        claim was just made)."""
        return sum(1 for slot in slots if _busy(slot))

    @staticmethod
    def exclusive_running(slots: Iterable[Slot]) -> bool:
        return any(_busy(slot) and slot.claim is not None and slot.claim.exclusive
                   for slot in slots)

    def may_fetch(self, slot: Slot, slots: Sequence[Slot]) -> bool:
        """A slot with a fetch hook, not dynamic, not a p-slot with nothing free, while no
        exclusive job runs."""
        if not slot.can_fetch:
            return False
        partition = self.partitions.get(slot.slot_id)
        if partition is not None and partition.exhausted():
            return False
        return not self.exclusive_running(slots)

    def wake_after_exclusive(self, slots: Sequence[Slot]) -> None:
        """When the exclusive job ends, every slot may fetch at once."""
        exclusive = self.exclusive_running(slots)
        if self._was_exclusive and not exclusive:
            for slot in slots:
                if slot.carve is None:
                    slot.clock.due_now = True
        self._was_exclusive = exclusive

    # -- slot ads -------------------------------------------------------------

    def signature(self, slot: Slot, slots: Sequence[Slot]) -> Hashable:
        """What decorate() shows of the slot and the machine: a slot ad built for one
        signature is good while it holds (startd/slots/slotadcache.py)."""
        partition = self.partitions.get(slot.slot_id)
        kept = None if partition is None else (partition.free, partition.next_index())
        return (slot.name, kept, self.running_jobs(slots), self.exclusive_running(slots))

    def decorate(self, slot: Slot, ad: MutableMapping[str, Any],
                 slots: Sequence[Slot]) -> MutableMapping[str, Any]:
        """Add the slot's kind and resources and the machine's state to its ad (returned)."""
        spec = self.specs[slot.slot_id]
        partition = self.partitions.get(slot.slot_id)
        cores: tuple[int, ...] = self.cores[slot.slot_id]
        if slot.carve is not None:
            kind, size, has, cores = DYNAMIC, slot.carve.size, slot.carve.size, slot.carve.cores
            ad["Name"] = slot.name
        elif partition is not None:
            kind, size, has = PARTITIONABLE, spec.size, partition.free
            ad[NEXT_SLOT_ATTR] = dynamic_name(slot.slot_id, partition.next_index(),
                                              self.startd_name)
        else:
            kind, size, has = STATIC, spec.size, spec.size
        ad["Cpus"], ad["Memory"], ad["Disk"] = has.cpus, has.memory_mb, has.disk_kb
        ad["TotalSlotCpus"], ad["TotalSlotMemory"] = size.cpus, size.memory_mb
        ad["TotalSlotDisk"] = size.disk_kb
        ad["TotalCpus"], ad["TotalMemory"] = self.machine.cpus, self.machine.memory_mb
        ad["TotalDisk"] = self.machine.disk_kb
        ad["SlotType"] = kind
        ad["PartitionableSlot"] = kind == PARTITIONABLE
        ad["DynamicSlot"] = kind == DYNAMIC
        ad["Mips"] = self.mips
        ad[RUNNING_JOBS] = self.running_jobs(slots)
        ad[EXCLUSIVE_RUNNING] = self.exclusive_running(slots)
        if self.assign_affinity and kind != PARTITIONABLE:
            ad[AFFINITY_ATTR] = ",".join(str(core) for core in affinity(cores, self.usable))
        return ad

    # -- dynamic slots --------------------------------------------------------

    def is_partitionable(self, slot: Slot) -> bool:
        return slot.carve is None and slot.slot_id in self.partitions

    def take(self, slot: Slot, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
             slots: list[Slot]) -> Slot:
        """The slot an accepted job runs in: `slot` itself, or for a p-slot a new dynamic
        slot (added to `slots`); the p-slot then fetches again at once if room is left."""
        if not self.is_partitionable(slot):
            return slot
        dslot = self.carve(slot, job_ad, slot_ad)
        slots.append(dslot)
        slot.clock.due_now = not self.partitions[slot.slot_id].exhausted()
        return dslot

    def carve(self, parent: Slot, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd) -> Slot:
        """A new Unclaimed dynamic slot of what the job requests (CarveError if it does
        not fit). Its number is the one the claim recorded in RemoteHost when free."""
        partition = self.partitions[parent.slot_id]
        cpus, memory_mb, disk_kb = requested(job_ad, slot_ad)
        index = index_in(job_ad.get("RemoteHost"), parent.slot_id)
        if index is None or index in partition.carved:
            index = partition.next_index()
        carve: Carve = partition.carve(Resources(cpus, memory_mb, disk_kb), index)
        now = time.time()
        name = dynamic_name(parent.slot_id, index, self.startd_name)
        dslot = Slot(parent.slot_id, name, parent.hooks,
                     status=SlotStatus(State.UNCLAIMED, Activity.IDLE, now, now), carve=carve)
        log.info("%s: carved %s (%d CPU(s), %d MB, %d KB disk); free now %s", parent.label,
                 dslot.label, cpus, memory_mb, disk_kb, _text(partition.free))
        return dslot

    def drop(self, dslot: Slot, slots: list[Slot]) -> Slot | None:
        """Remove a dynamic slot from `slots` and give its resources back; its p-slot
        (which may fetch at once)."""
        if dslot.carve is None:
            return None
        slots[:] = [slot for slot in slots if slot is not dslot]
        partition = self.partitions.get(dslot.slot_id)
        if partition is not None:
            partition.release(dslot.carve.index)
            log.info("%s: given back; free now %s", dslot.label, _text(partition.free))
        parent = next((slot for slot in slots
                       if slot.carve is None and slot.slot_id == dslot.slot_id), None)
        if parent is not None:
            parent.clock.due_now = True
        return parent


def _busy(slot: Slot) -> bool:
    """A job runs in the slot, or was accepted there and is starting."""
    return slot.starter is not None or (slot.claim is not None and not slot.claim.ended
                                        and slot.is_in(State.CLAIMED))


def _text(free: Resources[int]) -> str:
    return f"{free.cpus} CPU(s), {free.memory_mb} MB, {free.disk_kb} KB disk"


def new_carving(config: Config, settings: StartdSettings, facts: MachineFacts,
                startd_name: str) -> Carving:
    """The startd's slots sized from SLOT_TYPE_<N> (or NUM_SLOTS even slots) for its machine."""
    machine = machine_resources(config, facts.disk_kb)
    specs = (resolve(list(settings.slot_types), machine) if settings.slot_types
             else even_split(settings.num_slots, machine))
    return Carving(specs, machine, mips_of(config), settings.assign_cpu_affinity, startd_name)
