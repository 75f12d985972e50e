"""A process's children from /proc/<pid>/task/<tid>/children (Linux), without a scan,
and its state and start from /proc/<pid>/stat.

psutil finds children by reading the status of every process on the
machine; the kernel's per-thread `children` files list them directly, which
costs a few reads however busy the machine is. Where those files do not
exist (another OS, a kernel without CONFIG_PROC_CHILDREN) psutil is used.
"""

from __future__ import annotations

import os

import psutil

_PROC = "/proc"


def _read(path: str) -> bytes:
    """A small /proc file's bytes, read without a Python file object (an open, a
    read or two and a close: the buffered file's own checks cost as many again)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts: list[bytes] = []
        while True:
            part = os.read(fd, 4096)
            if not part:
                return b"".join(parts)
            parts.append(part)
    finally:
        os.close(fd)


def state_and_start(pid: int) -> tuple[str, float] | None:
    """The state letter of process `pid` and when it started, in seconds since the
    machine booted; None when there is no such process, OSError when /proc cannot be
    read. Not psutil's create_time: that adds the boot time, which the kernel derives
    from the wall clock each time it is read, so it moves by a second when the clock
    is corrected (NTP), and one process would no longer know another by it."""
    try:
        stat = _read(os.path.join(_PROC, str(pid), "stat"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the command name (in parentheses, which it may itself hold): the state,
    # then the fields from the fourth on; the start time is the 22nd, in clock ticks.
    rest = stat.rpartition(b")")[2].split()
    try:
        return rest[0].decode("ascii", "replace"), int(rest[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def _direct(pid: int) -> list[int] | None:
    """Pids of `pid`'s children; None when the kernel does not list them."""
    tasks = os.path.join(_PROC, str(pid), "task")
    try:
        threads = os.listdir(tasks)
    except FileNotFoundError:
        return []  # the process is gone: no children
    except OSError:
        return None
    found: list[int] = []
    for tid in threads:
        try:
            found += [int(word) for word in _read(os.path.join(tasks, tid, "children")).split()]
        except FileNotFoundError:
            if os.path.isdir(os.path.join(tasks, tid)):
                return None  # the thread is there, its list is not: not supported
            continue  # the thread ended meanwhile
        except OSError:
            continue
    return found


def child_pids(pid: int) -> list[int] | None:
    """The pids of `pid`'s children, exited ones not yet reaped included, from the
    kernel's lists (a few reads, no process object); None where it has none."""
    return _direct(pid)


def children(process: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
    """Like `process.children(recursive)`, reading the kernel's lists when it has them."""
    pids = _direct(process.pid)
    if pids is None:
        return list(process.children(recursive=recursive))
    found: list[psutil.Process] = []
    todo = list(pids)
    seen: set[int] = set()
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            continue
        if recursive:
            more = _direct(pid)
            todo += more or []
    return found
