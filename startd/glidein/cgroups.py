"""What the batch system gave this process: CPUs and memory from its cgroup limits.

A glide-in sizes its slots from these, not from the whole machine. cgroup v2
(`cpu.max`, `memory.max`) and v1 (`cpu.cfs_quota_us`/`cpu.cfs_period_us`,
`memory.limit_in_bytes`) are read along the process's cgroup path and every
parent up to the mount (a limit may sit on a parent); the smallest wins.
The CPUs this process may run on (its affinity, a batch system's cpuset)
bound the count too. The parsers are pure; `limits()` reads the files.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

# cgroup v1 reports "no limit" as a huge number near 2**63.
V1_UNLIMITED_BYTES = 1 << 60
MB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    cpus: int
    memory_mb: int | None   # None: no memory limit


def parse_cpu_max(text: str) -> float | None:
    """CPUs from v2 `cpu.max` ("200000 100000" -> 2.0; "max 100000" -> None)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = float(parts[1]) if len(parts) > 1 else 100000.0
    return float(parts[0]) / period if period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs from v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` (quota -1: no limit)."""
    quota, period = int(quota_text.strip()), int(period_text.strip())
    return quota / period if quota > 0 and period > 0 else None


def parse_memory_bytes(text: str) -> int | None:
    """Bytes from v2 `memory.max` or v1 `memory.limit_in_bytes` (None: no limit)."""
    text = text.strip()
    if text in ("", "max"):
        return None
    value = int(text)
    return None if value >= V1_UNLIMITED_BYTES else value


def cgroup_paths(proc_cgroup: str) -> dict[str, str]:
    """Controller -> path from /proc/self/cgroup text ("" names the v2 hierarchy)."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3:
            for controller in fields[1].split(","):
                paths[controller] = fields[2]
    return paths


def _folders(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder under `mount` and each parent up to the mount, when they exist
    (inside a container the mount may already be the cgroup itself)."""
    folder = mount / path.lstrip("/")
    chain = [folder, *folder.parents] if folder.is_relative_to(mount) else [mount]
    return [f for f in chain if f.is_relative_to(mount) and f.is_dir()]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _smallest(values: list[float | int | None]) -> float | int | None:
    found = [value for value in values if value is not None]
    return min(found) if found else None


def cgroup_cpus(root: Path, paths: dict[str, str]) -> float | None:
    values: list[float | int | None] = []
    if "" in paths:
        values += [parse_cpu_max(text) for f in _folders(root, paths[""])
                   if (text := _read(f / "cpu.max")) is not None]
    if "cpu" in paths:
        for f in _folders(root / "cpu", paths["cpu"]):
            quota, period = _read(f / "cpu.cfs_quota_us"), _read(f / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                values.append(parse_cfs(quota, period))
    return _smallest(values)


def cgroup_memory_bytes(root: Path, paths: dict[str, str]) -> int | None:
    values: list[float | int | None] = []
    if "" in paths:
        values += [parse_memory_bytes(text) for f in _folders(root, paths[""])
                   if (text := _read(f / "memory.max")) is not None]
    if "memory" in paths:
        values += [parse_memory_bytes(text) for f in _folders(root / "memory", paths["memory"])
                   if (text := _read(f / "memory.limit_in_bytes")) is not None]
    found = _smallest(values)
    return int(found) if found is not None else None


def limits(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> Limits:
    """This process's CPUs (at least 1) and memory limit."""
    paths = cgroup_paths(_read(Path(proc_cgroup)) or "")
    cpus = float(len(os.sched_getaffinity(0)))
    quota = cgroup_cpus(Path(root), paths)
    if quota is not None:
        cpus = min(cpus, float(math.ceil(quota)))
    memory = cgroup_memory_bytes(Path(root), paths)
    return Limits(max(1, int(cpus)), memory // MB if memory is not None else None)
