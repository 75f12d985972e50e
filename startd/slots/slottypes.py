"""HTCondor's slot types: `SLOT_TYPE_<N>`, `NUM_SLOTS_TYPE_<N>`, `SLOT_TYPE_<N>_PARTITIONABLE`.

`parse_slot_type` reads one `SLOT_TYPE_<N>` text (`cpus=100%, memory=100%`,
`cpus=4, mem=8G, disk=25%`, or one share for every resource: `1/4`, `25%`);
`resolve` turns the configured types into slot sizes for a machine's
`NUM_CPUS`, `MEMORY` and disk. Both are pure; errors name the knob.
Without any `NUM_SLOTS_TYPE_<N>`, the startd keeps NUM_SLOTS static slots
that split the machine evenly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from fetchwork.config.loader import Config
from fetchwork.config.resources import Resources
from fetchwork.errors import ConfigError

# Slot types looked at: SLOT_TYPE_1 .. SLOT_TYPE_<MAX_SLOT_TYPES> (HTCondor's bound).
MAX_SLOT_TYPES = 10
RESOURCES = ("cpus", "memory", "disk")
_NAMES = {"cpus": "cpus", "cpu": "cpus", "c": "cpus", "memory": "memory", "mem": "memory",
          "ram": "memory", "m": "memory", "r": "memory", "disk": "disk", "d": "disk",
          "swap": "swap", "s": "swap"}
# Memory is written in MB, disk in KB, unless a unit says otherwise (in KB here).
_UNITS_KB = {"k": 1, "m": 1024, "g": 1024 ** 2, "t": 1024 ** 3}
_DEFAULT_UNIT_KB = {"cpus": 1, "memory": 1024, "disk": 1}
_AMOUNT_RE = re.compile(r"\A(\d+(?:\.\d+)?)\s*([kmgt])?b?\Z", re.I)
_FRACTION_RE = re.compile(r"\A(\d+)\s*/\s*(\d+)\Z")
_PERCENT_RE = re.compile(r"\A(\d+(?:\.\d+)?)\s*%\Z")


# A share of one resource: a Fraction of the machine, an absolute amount (int,
# in the resource's unit: CPUs, MB, KB), or None for `auto` (an even part of the rest).
Share = Fraction | int | None


@dataclass(frozen=True)
class SlotType:
    """One `SLOT_TYPE_<N>`: its shares, how many slots, partitionable or not."""

    type_id: int
    shares: Mapping[str, Share]
    count: int
    partitionable: bool


@dataclass(frozen=True)
class SlotSpec:
    """One configured slot: its number, size and kind."""

    slot_id: int
    type_id: int          # 0: a NUM_SLOTS static slot (an even split, as before slot types)
    size: Resources[int]
    partitionable: bool


def parse_slot_type(text: str, knob: str) -> dict[str, Share]:
    """`cpus=2, memory=50%, disk=1/4` -> {resource: share}; empty text: auto for all."""
    shares: dict[str, Share] = {name: None for name in RESOURCES}
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    if len(items) == 1 and "=" not in items[0] and items[0].lower() != "auto":
        share = _share(items[0], "cpus", knob)  # one share for every resource
        if not isinstance(share, Fraction):
            raise ConfigError(f"{knob}: a single value must be a share such as 25% or 1/4, "
                              f"not {items[0]!r}")
        return {name: share for name in RESOURCES}
    joined = re.sub(r"\s*=\s*", "=", text.strip())
    for item in (i for i in re.split(r"[,\s]+", joined) if i):
        name, sep, value = item.partition("=")
        if item.lower() == "auto":
            continue
        resource = _NAMES.get(name.strip().lower())
        if not sep or resource is None:
            raise ConfigError(f"{knob}: expected resource=amount with resource cpus, memory "
                              f"or disk, not {item!r}")
        if resource != "swap":
            shares[resource] = _share(value.strip(), resource, knob)
    return shares


def _share(text: str, resource: str, knob: str) -> Share:
    low = text.lower()
    if low == "auto":
        return None
    match = _PERCENT_RE.match(low)
    if match:
        percent = Fraction(match.group(1))
        if not 0 < percent <= 100:
            raise ConfigError(f"{knob}: {resource}={text} must be a percentage in (0, 100]")
        return percent / 100
    match = _FRACTION_RE.match(low)
    if match:
        top, bottom = int(match.group(1)), int(match.group(2))
        if bottom == 0 or not 0 < top <= bottom:
            raise ConfigError(f"{knob}: {resource}={text} must be a fraction in (0, 1]")
        return Fraction(top, bottom)
    match = _AMOUNT_RE.match(low)
    if match and (resource != "cpus" or match.group(2) is None):
        unit_kb = _UNITS_KB[match.group(2)] if match.group(2) else _DEFAULT_UNIT_KB[resource]
        per_unit = 1 if resource == "cpus" else _DEFAULT_UNIT_KB[resource]
        amount = int(Fraction(match.group(1)) * unit_kb / per_unit)
        if amount <= 0 and resource != "disk":
            raise ConfigError(f"{knob}: {resource}={text} must be more than zero")
        return amount
    raise ConfigError(f"{knob}: {resource}={text!r} is not an amount, a percentage "
                      "(50%) or a fraction (1/2)")


def resolve(types: list[SlotType], machine: Resources[int]) -> list[SlotSpec]:
    """The slots of `types` (in type order, numbered from 1) sized for `machine`.

    Fractions are of the whole machine; `auto` gives each slot asking it an
    even part of what the others leave. More than the machine has is an error
    naming the slot types.
    """
    slots = [(slot_type, n) for slot_type in types for n in range(slot_type.count)]
    sizes: dict[str, list[int]] = {}
    for resource in RESOURCES:
        total = getattr(machine, _FIELD[resource])
        fixed = [_fixed(slot_type.shares[resource], total) for slot_type, _n in slots]
        used = sum(amount for amount in fixed if amount is not None)
        autos = sum(1 for amount in fixed if amount is None)
        knobs = ", ".join(sorted({f"SLOT_TYPE_{t.type_id}" for t, _n in slots}))
        if used > total or (autos and used >= total and resource == "cpus"):
            raise ConfigError(f"{knobs}: the slots ask for {used} {_UNIT[resource]} but the "
                              f"machine has {total} ({_MACHINE_KNOB[resource]})")
        each = (total - used) // autos if autos else 0
        sizes[resource] = [amount if amount is not None else each for amount in fixed]
    specs = []
    for index, (slot_type, _n) in enumerate(slots):
        size = Resources(sizes["cpus"][index], sizes["memory"][index], sizes["disk"][index])
        if size.cpus < 1 or size.memory_mb < 1:
            raise ConfigError(f"SLOT_TYPE_{slot_type.type_id}: slot {index + 1} would get "
                              f"{size.cpus} CPU(s) and {size.memory_mb} MB; each slot needs "
                              "at least 1 CPU and 1 MB")
        specs.append(SlotSpec(index + 1, slot_type.type_id, size, slot_type.partitionable))
    return specs


_FIELD = {"cpus": "cpus", "memory": "memory_mb", "disk": "disk_kb"}
_UNIT = {"cpus": "CPU(s)", "memory": "MB of memory", "disk": "KB of disk"}
_MACHINE_KNOB = {"cpus": "NUM_CPUS", "memory": "MEMORY", "disk": "free disk under EXECUTE"}


def _fixed(share: Share, total: int) -> int | None:
    if share is None:
        return None
    if isinstance(share, Fraction):
        return int(share * total)
    return share


def even_split(num_slots: int, machine: Resources[int]) -> list[SlotSpec]:
    """NUM_SLOTS static slots, each an even part of the machine (at least 1 CPU and 1 MB)."""
    share = max(num_slots, 1)
    size = Resources(max(machine.cpus // share, 1), max(machine.memory_mb // share, 1),
                     max(machine.disk_kb // share, 0))
    return [SlotSpec(n, 0, size, False) for n in range(1, num_slots + 1)]


def read_slot_types(config: Config) -> list[SlotType]:
    """The slot types with NUM_SLOTS_TYPE_<N> > 0, in order of N; [] when none is set."""
    types = []
    for n in range(1, MAX_SLOT_TYPES + 1):
        if f"NUM_SLOTS_TYPE_{n}" not in config or not (config.get(f"NUM_SLOTS_TYPE_{n}")
                                                       or "").strip():
            continue
        count = config.get_int(f"NUM_SLOTS_TYPE_{n}")
        if count < 0:
            raise ConfigError(f"NUM_SLOTS_TYPE_{n} must be 0 or more, not {count}")
        if count == 0:
            continue
        text = config.get(f"SLOT_TYPE_{n}") or ""
        partitionable = (f"SLOT_TYPE_{n}_PARTITIONABLE" in config
                         and bool((config.get(f"SLOT_TYPE_{n}_PARTITIONABLE") or "").strip())
                         and config.get_bool(f"SLOT_TYPE_{n}_PARTITIONABLE"))
        types.append(SlotType(n, parse_slot_type(text, f"SLOT_TYPE_{n}"), count, partitionable))
    return types


def machine_resources(config: Config, disk_kb: int) -> Resources[int]:
    """NUM_CPUS and MEMORY (which default to what was detected), and the disk given."""
    cpus, memory_mb = config.get_int("NUM_CPUS"), config.get_int("MEMORY")
    for knob, value in (("NUM_CPUS", cpus), ("MEMORY", memory_mb)):
        if value < 1:
            raise ConfigError(f"{knob} must be at least 1, not {value}")
    return Resources(cpus, memory_mb, disk_kb)
