"""Merged configurations remembered per process, reused while their files are unchanged.

A configuration is read on every job's path (the starter, the hooks it runs
in-process), and parsing defaults.conf costs milliseconds. `Sources` records
what one load looked at: every file it read and every file whose presence or
absence it relied on, each with its identity (device, inode, size, change
and modification times). `remembered` gives back what an
earlier load made with the same inputs (the environment, the file named
explicitly) when a stat of each recorded path shows nothing changed.
A process forked from one that loaded (a starter forked by its zygote)
starts with the memo warm, so its own load costs a few stats.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from typing import Any

# Distinct inputs remembered at once (a process loads one or two).
MAX_ENTRIES = 8

Identity = tuple[int, int, int, int, int] | None


def identity(path: str) -> Identity:
    """What changes when a file is written, replaced or removed (None: no such file)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class Sources:
    """The paths one load depended on, with their identities when it looked."""

    def __init__(self) -> None:
        self.seen: dict[str, Identity] = {}

    def note(self, path: str) -> Identity:
        found = identity(path)
        self.seen.setdefault(path, found)
        return found

    def unchanged(self) -> bool:
        return all(identity(path) == seen for path, seen in self.seen.items())


_memo: dict[Hashable, tuple[Sources, Any]] = {}


def inputs_key(env: Mapping[str, str], *more: Hashable) -> Hashable:
    """The environment a load sees (its knobs, and what `$ENV()` expands), and `more`."""
    return (tuple(sorted(env.items())), *more)


def remembered(key: Hashable) -> Any | None:
    """What `remember` kept for `key`, if no file it depended on has changed since."""
    entry = _memo.get(key)
    if entry is None:
        return None
    sources, value = entry
    if sources.unchanged():
        return value
    del _memo[key]
    return None


def remember(key: Hashable, sources: Sources, value: Any) -> None:
    if len(_memo) >= MAX_ENTRIES and key not in _memo:
        _memo.pop(next(iter(_memo)))
    _memo[key] = (sources, value)


def forget() -> None:
    """Drop everything remembered (the next load reads every file)."""
    _memo.clear()
