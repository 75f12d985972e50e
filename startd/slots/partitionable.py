"""A partitionable slot's bookkeeping: carving dynamic slots and giving them back (pure).

A `Partition` has the size of its p-slot and the CPU cores given to it
(numbers 0..NUM_CPUS-1, which may be more than the machine has). A fetched
job carves a dynamic slot of what it requests: the lowest free d-slot
number (`slot1_1`, `slot1_2`, ...) and the lowest free cores of the
p-slot. What is not carved is free for the next fetch; a finished job's
d-slot gives everything back. `affinity` maps core numbers onto the cores
this process may use, wrapping when more are advertised than exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fetchwork.config.resources import Resources
from fetchwork.errors import FetchworkError


class CarveError(FetchworkError):
    """A dynamic slot was asked for more than its partitionable slot has free."""


@dataclass(frozen=True)
class Carve:
    """One dynamic slot: its number within the p-slot, its resources and cores."""

    index: int
    size: Resources[int]
    cores: tuple[int, ...]


@dataclass
class Partition:
    """The resources of one partitionable slot, and the dynamic slots carved from it."""

    size: Resources[int]
    cores: tuple[int, ...]
    carved: dict[int, Carve] = field(default_factory=dict)

    @property
    def free(self) -> Resources[int]:
        used = Resources(0, 0, 0)
        for carve in self.carved.values():
            used = used + carve.size
        return self.size - used

    def next_index(self) -> int:
        """The number the next dynamic slot gets: the lowest one not in use."""
        index = 1
        while index in self.carved:
            index += 1
        return index

    def fits(self, request: Resources[int]) -> bool:
        return self.free.covers(request)

    def exhausted(self) -> bool:
        """No CPU or no memory left: no job can fit (every job asks for some)."""
        free = self.free
        return free.cpus <= 0 or free.memory_mb <= 0

    def carve(self, request: Resources[int], index: int | None = None) -> Carve:
        """Carve a dynamic slot of `request` (number `index`, default the next free)."""
        if not self.fits(request):
            raise CarveError(f"{request} does not fit in the free {self.free}")
        index = self.next_index() if index is None else index
        if index in self.carved or index < 1:
            raise CarveError(f"dynamic slot {index} is in use")
        taken = {core for carve in self.carved.values() for core in carve.cores}
        cores = tuple(core for core in self.cores if core not in taken)[:request.cpus]
        carve = Carve(index, request, cores)
        self.carved[index] = carve
        return carve

    def release(self, index: int) -> Carve | None:
        """Give dynamic slot `index` back; the carve, or None if it was not carved."""
        return self.carved.pop(index, None)


def core_ranges(sizes: Iterable[int]) -> list[tuple[int, ...]]:
    """Consecutive core numbers for slots of `sizes` CPUs, in order (0-based)."""
    ranges, start = [], 0
    for cpus in sizes:
        ranges.append(tuple(range(start, start + cpus)))
        start += cpus
    return ranges


def affinity(cores: Sequence[int], usable: Sequence[int]) -> tuple[int, ...]:
    """The distinct usable cores that core numbers `cores` map to (wrapping around)."""
    if not usable:
        return ()
    ordered = sorted(usable)
    return tuple(sorted({ordered[core % len(ordered)] for core in cores}))
