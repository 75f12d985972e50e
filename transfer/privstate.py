"""The job user's rights for a stretch of file work in a root process, and back
(HTCondor's "priv states"): the effective ids change, the real and saved ones stay.

`as_user((uid, gid))` sets the supplementary groups to the user's group, then the
effective gid, then the effective uid, in that order (each later call needs the
root the earlier ones still have), and puts them back in the reverse order when the
block ends, however it ends. Inside the block every file is opened, created and
checked with exactly the user's rights: root's capabilities over files go with
the effective uid, root's groups are gone, and a file made belongs to the user.
What does not change:

- the real and saved uid stay 0, so the user cannot signal this process (a signal
  needs the sender's uid to match the target's real or saved uid), and the kernel
  marks a process whose effective ids changed as not dumpable, so the user cannot
  ptrace it or read its memory either (that mark stays: nothing of root's is lost
  by it);
- descriptors opened before (the pool's Redis connection) keep working.

Only the calling thread changes. glibc's set*id functions (and Python's, which
call them) change every thread of the process, so another thread (a hook's
waiter in a starter, the supervisor of `fetchwork up`) would find itself with the
user's rights meanwhile; the kernel's calls change the caller only, so they are
made directly, by number (Linux on x86-64 and on ARM64). Elsewhere glibc's are
used, and only in a process that runs no other thread (`UserRightsError` when it
does; the caller then forks). A thread started inside the block takes the user's
rights with it (the transfer's hashing helpers). A program started inside the
block would inherit root's real and saved uid and could take root back: nothing
is started inside it (the transfer forks a child that gives up root for good when
it runs plugins).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fetchwork.errors import FetchworkError

# The kernel's numbers of setgroups, setresgid and setresuid, by machine.
_SYSCALLS = {"x86_64": (116, 119, 117), "amd64": (116, 119, 117),
             "aarch64": (159, 149, 147), "arm64": (159, 149, 147)}
_NUMBERS = _SYSCALLS.get(platform.machine().lower()) if sys.platform == "linux" else None
_LIBC = ctypes.CDLL(None, use_errno=True) if _NUMBERS is not None else None
_KEEP = ctypes.c_long(-1)  # setres*id: leave that id as it is


class UserRightsError(FetchworkError):
    """The process cannot take the user's rights and give them back safely here."""


def per_thread() -> bool:
    """Whether the change is the calling thread's only (this machine's kernel calls)."""
    return _LIBC is not None


def usable() -> bool:
    """Whether `as_user` may run now: root, and the change is the caller's only or no
    other thread runs."""
    return os.geteuid() == 0 and (per_thread() or threading.active_count() == 1)


def ids() -> tuple[tuple[int, int, int], tuple[int, int, int], list[int]]:
    """The calling thread's (real, effective, saved) uids and gids and its groups."""
    return os.getresuid(), os.getresgid(), os.getgroups()


@contextmanager
def as_user(user: tuple[int, int]) -> Iterator[None]:
    """Run the block with `user`'s (uid, gid) effective ids and only its group; back to
    root's after. UserRightsError (before any change) when the ids cannot be changed
    safely here, or `user` is root."""
    uid, gid = user
    if uid == 0:
        raise UserRightsError("the job's files are never handled as root")
    if os.geteuid() != 0:
        raise UserRightsError("only a root process changes its effective user")
    if not usable():
        raise UserRightsError("another thread runs: the change of user would be its too")
    egid, groups = os.getegid(), os.getgroups()
    try:
        _setgroups([gid])
        _setegid(gid)
        _seteuid(uid)
        if os.geteuid() != uid or os.getegid() != gid:  # pragma: no cover - kernel's word
            raise UserRightsError(f"could not take the ids {uid}:{gid}")
        yield
    finally:
        _restore(egid, groups)


def _restore(egid: int, groups: list[int]) -> None:
    """Root's effective ids and groups again. A process that cannot get them back must
    not go on as a mix of both: it ends at once."""
    try:
        _seteuid(0)
        _setegid(egid)
        _setgroups(groups)
    except OSError:  # pragma: no cover - the saved uid is 0: this does not fail
        os._exit(70)
    if os.geteuid() != 0 or os.getegid() != egid:  # pragma: no cover
        os._exit(70)


def _call(number: int, *args: object) -> None:
    assert _LIBC is not None
    if _LIBC.syscall(ctypes.c_long(number), *args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def _setgroups(groups: list[int]) -> None:
    if _NUMBERS is None:
        os.setgroups(groups)
        return
    listed = (ctypes.c_uint * max(1, len(groups)))(*groups)
    _call(_NUMBERS[0], ctypes.c_long(len(groups)), listed)


def _setegid(gid: int) -> None:
    if _NUMBERS is None:
        os.setegid(gid)
        return
    _call(_NUMBERS[1], _KEEP, ctypes.c_long(gid), _KEEP)


def _seteuid(uid: int) -> None:
    if _NUMBERS is None:
        os.seteuid(uid)
        return
    _call(_NUMBERS[2], _KEEP, ctypes.c_long(uid), _KEEP)
