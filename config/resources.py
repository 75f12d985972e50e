"""An amount of a machine's resources: CPUs, memory in MB, disk in KB (pure).

Both sides count in it: the startd sizes and carves its slots in whole
units (`Resources[int]`, from NUM_CPUS, MEMORY and the execute folder's
disk); the broker's backfill plans machines, running jobs and reservations
from the ads (`Resources[float]`, math.inf where a slot ad sets no bound).
One relation compares two amounts: `a.covers(b)`, `b` fits within `a`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

# Whole units on the startd; floats, and math.inf for unbounded, in the broker.
Amount = TypeVar("Amount", int, float)


@dataclass(frozen=True)
class Resources(Generic[Amount]):
    """CPUs, memory (MB) and disk (KB)."""

    cpus: Amount
    memory_mb: Amount
    disk_kb: Amount

    def covers(self, other: Resources[Amount]) -> bool:
        """Whether `other` fits within these: no resource of it is larger."""
        return (self.cpus >= other.cpus and self.memory_mb >= other.memory_mb
                and self.disk_kb >= other.disk_kb)

    def __add__(self, other: Resources[Amount]) -> Resources[Amount]:
        return Resources(self.cpus + other.cpus, self.memory_mb + other.memory_mb,
                         self.disk_kb + other.disk_kb)

    def __sub__(self, other: Resources[Amount]) -> Resources[Amount]:
        return Resources(self.cpus - other.cpus, self.memory_mb - other.memory_mb,
                         self.disk_kb - other.disk_kb)
