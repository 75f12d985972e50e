"""Slot ads and jobs for the backfill tests: partitionable slots as the startd
advertises them, and jobs that ask for CPUs and memory for a walltime."""

from __future__ import annotations

FITS = {"$expr": "TARGET.Cpus >= MY.RequestCpus"}


def slot(machine: str, free_cpus: int, total_cpus: int) -> dict:
    """A partitionable slot's ad: what is still free, and its configured size."""
    return {"Name": f"slot1@{machine}", "Machine": machine, "Cpus": free_cpus,
            "Memory": 1000 * free_cpus, "TotalSlotCpus": total_cpus,
            "TotalSlotMemory": 1000 * total_cpus, "TotalCpus": total_cpus,
            "TotalMemory": 1000 * total_cpus, "SlotType": "Partitionable",
            "PartitionableSlot": True}


def job(tag: str, cpus: int, walltime_s: int, **more) -> dict:
    return {"Cmd": "/bin/true", "Tag": tag, "RequestCpus": cpus, "RequestMemory": 1000 * cpus,
            "AllowedJobDuration": walltime_s, "Requirements": FITS, **more}


def tag(ad) -> str | None:
    return None if ad is None else ad["Tag"]
