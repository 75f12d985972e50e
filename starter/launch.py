"""Starting the job's main process: spawned without copying the starter, or forked.

A starter forked by the zygote starts its job with `posix_spawn`, which
does not copy the starter's memory (the C library spawns with a shared
address space and the starter waits until the job has exec'd): forking
the starter instead costs milliseconds of page copying per job. The job
must become its user, and `posix_spawn` can only reset the effective ids
to the real ones, so for the call the spawning thread sets its real ids
(and its groups) to the job user's, then takes back root's; it also enters the
job's directory and pins itself to the job's cores for the call, both of
which the job inherits. (For the microseconds between the job's exec and
the starter taking its ids back, the job could signal the starter; a
starter killed then takes the job along, as below.) Linux keeps ids per
thread and the C library's set*id calls change every thread's, signalling
each one, which in a starter with hook threads cost most of a millisecond
per job; the spawn changes only its own thread's, with the system calls
themselves, so no other thread ever runs with the job user's ids.

What `posix_spawn` cannot do is ask the kernel to kill the job when its
starter dies (the parent-death signal, set after the user switch): under
the zygote that is the zygote's work, which adopts the processes a dead
starter leaves and kills them (`zygote.Zygote`). A starter started on its
own forks its job and sets the signal in the child.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fetchwork.starter.jobspec import LaunchPlan, exec_failure

_PR_SET_PDEATHSIG = 1
# Signals Python ignores that a job must get at their defaults (as subprocess resets them).
_DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ")
                         if hasattr(signal, name))

# Set in a starter forked by the zygote: the processes it leaves when it dies are killed.
orphans_are_killed = False

# The spawn changes process-wide state (the directory) for its duration.
_ids_lock = threading.Lock()

# System call numbers of setresuid, setresgid, setgroups (the 32-bit-id forms).
_ID_CALLS = {"x86_64": (117, 119, 116), "aarch64": (147, 149, 159)}


@functools.cache
def c_library() -> ctypes.CDLL:
    """The C library (loaded once: a zygote loads it before its forks)."""
    return ctypes.CDLL(None, use_errno=True)


def start(plan: LaunchPlan, user: tuple[int, int] | None, cores: tuple[int, ...] | None,
          streams: tuple[int, int, int]) -> int:
    """The job's main process, in its own session, as `user` when this is root; its pid.

    Raises JobStartError (from `exec_failure`) when the program cannot be run.
    """
    switch = user if user is not None and os.geteuid() == 0 else None
    try:
        if orphans_are_killed and hasattr(os, "posix_spawn"):
            return _spawn(plan, switch, cores, streams)
        return _fork(plan, switch, cores, streams)
    except OSError as exc:
        raise exec_failure(plan.argv[0], exc) from exc


def _fork(plan: LaunchPlan, user: tuple[int, int] | None, cores: tuple[int, ...] | None,
          streams: tuple[int, int, int]) -> int:
    options: dict[str, Any] = {}
    if user is not None:
        options.update(user=user[0], group=user[1], extra_groups=[])
    proc = subprocess.Popen(
        list(plan.argv), stdin=streams[0], stdout=streams[1], stderr=streams[2],
        cwd=plan.cwd, env=dict(plan.env), close_fds=True,
        start_new_session=True, preexec_fn=_die_with(os.getpid(), cores), **options)
    proc.returncode = 0  # the Popen object is dropped: the caller waits for the pid
    return proc.pid


def _spawn(plan: LaunchPlan, user: tuple[int, int] | None, cores: tuple[int, ...] | None,
           streams: tuple[int, int, int]) -> int:
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, fd, target)
                                      for target, fd in enumerate(streams)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in inheritable_fds()]
    with ids_switched(user, plan.cwd), _pinned(cores):
        # argv[0] is a path (`launch_plan` resolves Cmd against the job's directory).
        return os.posix_spawn(plan.argv[0], list(plan.argv), dict(plan.env),
                              file_actions=actions, setsid=True, resetids=user is not None,
                              setsigmask=(), setsigdef=_DEFAULT_SIGNALS)


@contextlib.contextmanager
def ids_switched(user: tuple[int, int] | None, folder: str) -> Iterator[None]:
    """For the block: `user`'s real ids (`_as_real`) in `folder`, one thread at a time."""
    with _ids_lock, _as_real(user), _inside(folder):
        yield


@contextlib.contextmanager
def _as_real(user: tuple[int, int] | None) -> Iterator[None]:
    """Real ids (and no supplementary groups) of `user` for the block; root's after.

    The effective ids stay root's, so this process keeps its rights; the
    spawned job gets the real ids as its effective ones (`resetids`), and
    exec makes them its saved ids too.
    """
    if user is None:
        yield
        return
    setresuid, setresgid, setgroups = thread_id_calls()
    groups = os.getgroups()
    real_uid, real_gid = os.getuid(), os.getgid()
    setgroups([])
    try:
        setresgid(user[1], -1, -1)
        setresuid(user[0], -1, -1)
        yield
    finally:
        setresuid(real_uid, -1, -1)
        setresgid(real_gid, -1, -1)
        setgroups(groups)


IdCalls = tuple[Callable[[int, int, int], None], Callable[[int, int, int], None],
                Callable[[list[int]], None]]


@functools.cache
def thread_id_calls() -> IdCalls:
    """setresuid, setresgid and setgroups for the calling thread alone (the system
    calls); the C library's process-wide ones where the numbers are not known."""
    numbers = _ID_CALLS.get(platform.machine()) if platform.system() == "Linux" else None
    try:
        syscall = c_library().syscall if numbers is not None else None
    except (OSError, AttributeError):  # pragma: no cover - no C library to call
        syscall = None
    if numbers is None or syscall is None:
        return os.setresuid, os.setresgid, os.setgroups
    set_uids, set_gids, set_groups = numbers

    def call(*args: Any) -> None:
        if syscall(*args) != 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number))

    def ids(number: int) -> Callable[[int, int, int], None]:
        return lambda real, effective, saved: call(
            number, ctypes.c_long(real), ctypes.c_long(effective), ctypes.c_long(saved))

    def groups(values: list[int]) -> None:
        array = (ctypes.c_uint * max(1, len(values)))(*values)
        call(set_groups, ctypes.c_long(len(values)), array)

    return ids(set_uids), ids(set_gids), groups


@contextlib.contextmanager
def _inside(folder: str) -> Iterator[None]:
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chdir(folder)
        yield
    finally:
        os.fchdir(here)
        os.close(here)


@contextlib.contextmanager
def _pinned(cores: tuple[int, ...] | None) -> Iterator[None]:
    """This thread on `cores` for the block (a spawned job inherits the thread's set)."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def inheritable_fds() -> list[int]:
    """Descriptors above 2 a job would inherit (a library may open one without
    close-on-exec): closed in the job, as subprocess's close_fds does."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    found = []
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    found.append(fd)
            except OSError:
                continue  # the listing's own descriptor, closed by now
    return found


def _die_with(starter_pid: int, cores: tuple[int, ...] | None = None) -> Any:
    """A child-side step: SIGKILL the job's main process if the starter dies.

    Runs in the forked child after the user switch (which would clear the
    setting), so it only calls a C function loaded beforehand. The rest of
    the tree is found and killed by a starter that is still alive.
    """
    try:
        prctl = c_library().prctl
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None

    def step() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != starter_pid:  # the starter died before the call
            os._exit(127)
        if cores:  # ASSIGN_CPU_AFFINITY: the cores of the job's slot
            os.sched_setaffinity(0, cores)

    return step
