"""`JobProcess`: every OS side effect of running one job, in one place.

Spawn (own session and process group, as the job user), signals to the main
process or the whole tree, waiting for the main process, psutil sampling,
and killing and reaping whatever the job leaves behind.

The tree is found three ways, as HTCondor's process family tracking does:
processes in the job's session, processes carrying the job's environment
marker, and descendants of either. The starter makes itself a child
subreaper, so a job process whose parent died is re-parented to the
starter instead of init and is still found, killed and reaped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

from fetchwork.starter import launch
from fetchwork.starter.jobspec import (
    STANDARD_ERROR,
    STANDARD_INPUT,
    STANDARD_OUTPUT,
    LaunchPlan,
    open_failure,
)
from fetchwork.starter.launch import c_library
from fetchwork.starter.proctree import child_pids, children

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux); False if unavailable."""
    try:
        return c_library().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


@dataclass(frozen=True)
class Sample:
    """One look at the job's tree: live processes, CPU seconds so far, resident KB."""

    num_pids: int
    user_cpu_s: float
    sys_cpu_s: float
    rss_kb: int


class JobProcess:
    """The job's processes and everything done to them."""

    def __init__(self, plan: LaunchPlan, user: tuple[int, int] | None, marker: tuple[str, str],
                 cores: tuple[int, ...] | None = None):
        self.plan = plan
        self.cores = usable(cores)  # CPU affinity of the job (None: the starter's)
        self.user = user
        self.marker = marker
        self.pid: int | None = None
        self.pidfd: int | None = None
        self.status: int | None = None  # decoded: exit code, or -signal
        self._reaped = False
        self._owned: dict[tuple[int, float], bool] = {}
        self._reaped_user_s = 0.0
        self._reaped_sys_s = 0.0
        self._me_process: psutil.Process | None = None
        # Set once the main process has exited with nothing else of the job left: no
        # process of the job exists then to start another, so it stays true.
        self._all_gone = False

    @property
    def _me(self) -> psutil.Process:
        """This process (made on first use: not needed to start the job)."""
        if self._me_process is None:
            self._me_process = psutil.Process()
        return self._me_process

    # -- spawning ----------------------------------------------------------

    def spawn(self) -> int:
        """Start the job; StarterError (with the reason) when it cannot start."""
        with file_identity(self.user):
            streams = self.open_streams()
        try:
            self.pid = launch.start(self.plan, self.user, self.cores, streams)
        finally:
            for fd in set(streams):
                os.close(fd)
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # pragma: no cover - old kernels
            self.pidfd = None
        return self.pid

    def open_streams(self) -> tuple[int, int, int]:
        """In, Out and Err, opened with the job user's file access rights: descriptors
        (close-on-exec here; the spawn gives them to the job as 0, 1 and 2), opened with
        plain system calls rather than as buffered file objects, which nothing reads."""
        plan = self.plan
        try:
            stdin = os.open(plan.stdin_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise open_failure(plan.stdin_path, STANDARD_INPUT, exc) from exc
        try:
            stdout = _open_output(plan.stdout_path, STANDARD_OUTPUT)
            stderr = stdout if plan.stderr_path == plan.stdout_path else \
                _open_output(plan.stderr_path, STANDARD_ERROR)
        except BaseException:
            os.close(stdin)
            raise
        return stdin, stdout, stderr

    # -- signals -----------------------------------------------------------

    def signal_main(self, number: int) -> None:
        """Signal the main process only (HTCondor sends KillSig to the job's process)."""
        if self.pid is not None and not self._reaped:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def signal_tree(self, number: int) -> None:
        """Signal the job's process group and every process of its tree."""
        if self.pid is None:
            return
        if not self._reaped:
            # The main process is not reaped, so its group id cannot be reused.
            try:
                os.killpg(self.pid, number)
            except (ProcessLookupError, PermissionError):
                pass
        if self._nothing_left():
            return
        for proc in self.tree():
            try:
                proc.send_signal(number)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def stop(self) -> None:
        self.signal_tree(signal.SIGSTOP)

    def cont(self) -> None:
        self.signal_tree(signal.SIGCONT)

    def hard_kill(self) -> None:
        self.signal_tree(signal.SIGKILL)

    # -- waiting -----------------------------------------------------------

    def main_exited(self) -> bool:
        """Whether the main process has ended (it stays unreaped until `reap_main`)."""
        if self.pid is None or self._reaped:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # pragma: no cover - reaped elsewhere
            return True

    def reap_main(self) -> int:
        """Wait for the main process; kill what it left; return the decoded status."""
        assert self.pid is not None
        if not self._reaped:
            self.hard_kill()  # a job's leftovers do not outlive it, as in HTCondor
            _pid, status, usage = os.wait4(self.pid, 0)
            self._reaped = True
            self._reaped_user_s += usage.ru_utime
            self._reaped_sys_s += usage.ru_stime
            self.status = os.waitstatus_to_exitcode(status)
            if self.pidfd is not None:
                os.close(self.pidfd)
                self.pidfd = None
        return self.status if self.status is not None else 0

    def cleanup(self) -> int:
        """SIGKILL and reap every process left of the job; how many there were."""
        if self._nothing_left():
            return 0
        left = list(self.tree())
        for proc in left:
            try:
                proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        psutil.wait_procs(left, timeout=5)
        self.reap_orphans()
        return len(left)

    def reap_orphans(self) -> None:
        """Reap job processes re-parented to the starter that have exited."""
        for child in children(self._me):
            if child.pid == self.pid or not self._is_job(child):
                continue
            try:
                pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if pid:
                self._reaped_user_s += usage.ru_utime
                self._reaped_sys_s += usage.ru_stime

    def _nothing_left(self) -> bool:
        """Whether the job has no process left but its main one, which has exited:
        the starter has no child but that one (or none). Every process of the job
        descends from the starter, a subreaper, and a child of an exited process is
        the starter's own child then: no sweep of the tree (psutil objects, a read
        of each one's start time and environment) can find anything more. The
        common end of a job, checked with a few reads of the kernel's lists."""
        if self._all_gone:
            return True
        pids = child_pids(os.getpid())
        if pids is None or any(pid != self.pid for pid in pids):
            return False
        gone = not pids or self.main_exited()
        self._all_gone = gone and self.pid is not None
        return gone

    # -- measuring ---------------------------------------------------------

    def tree(self) -> Iterator[psutil.Process]:
        """The job's live processes (the main one included while it runs)."""
        try:
            candidates = children(self._me, recursive=True)
        except psutil.Error:  # pragma: no cover
            return
        owned_pids: set[int] = set()
        chosen = [proc for proc in candidates if self._is_job(proc)]
        owned_pids.update(proc.pid for proc in chosen)
        # Descendants of job processes are the job's, whatever they did to
        # their session or environment.
        changed = True
        while changed:
            changed = False
            for proc in candidates:
                if proc.pid in owned_pids:
                    continue
                try:
                    parent = proc.ppid()
                except psutil.Error:
                    continue
                if parent in owned_pids:
                    owned_pids.add(proc.pid)
                    chosen.append(proc)
                    changed = True
                    self._remember(proc)
        yield from chosen

    def _remember(self, proc: psutil.Process) -> None:
        """Keep a descendant known as the job's after its parent dies and it is re-parented."""
        try:
            self._owned[(proc.pid, proc.create_time())] = True
        except psutil.Error:
            pass

    def _is_job(self, proc: psutil.Process) -> bool:
        try:
            key = (proc.pid, proc.create_time())
        except psutil.Error:
            return False
        verdict = self._owned.get(key)
        if verdict is None:
            verdict = self._check_job(proc)
            self._owned[key] = verdict
        return verdict

    def _check_job(self, proc: psutil.Process) -> bool:
        if proc.pid == self.pid:
            return True
        try:
            if self.pid is not None and os.getsid(proc.pid) == self.pid:
                return True
        except OSError:
            pass
        try:
            return proc.environ().get(self.marker[0]) == self.marker[1]
        except (psutil.Error, OSError):
            return False

    def sample(self) -> Sample:
        """Count, CPU seconds (with exited children) and resident size of the tree."""
        if self._reaped and (self._all_gone or child_pids(os.getpid()) == []):
            # The job is over and nothing of it is left: what it used is what its
            # reaped processes used.
            return Sample(0, self._reaped_user_s, self._reaped_sys_s, 0)
        self.reap_orphans()
        num_pids = 0
        user_s, sys_s = self._reaped_user_s, self._reaped_sys_s
        rss_kb = 0
        for proc in self.tree():
            try:
                with proc.oneshot():
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
            except psutil.Error:
                continue
            num_pids += 1
            user_s += times.user + times.children_user
            sys_s += times.system + times.children_system
            rss_kb += rss // 1024
        return Sample(num_pids, user_s, sys_s, rss_kb)


def usable(cores: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The cores of `cores` this process may use (None when none or not given)."""
    if not cores:
        return None
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None
    chosen = tuple(core for core in cores if core in allowed)
    if len(chosen) < len(cores):
        log.warning("cores %s are not available here; pinning the job to %s",
                    sorted(set(cores) - allowed), list(chosen) or "any core")
    return chosen or None


def _open_output(path: str, stream: str) -> int:
    """`path` opened for the job to write: truncated (the null device appended to)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
    flags |= os.O_APPEND if path == os.devnull else os.O_TRUNC
    try:
        return os.open(path, flags, 0o666)
    except OSError as exc:
        raise open_failure(path, stream, exc) from exc


@contextlib.contextmanager
def file_identity(user: tuple[int, int] | None) -> Iterator[None]:
    """Within the block, this thread opens files as `user` (Linux setfsuid/setfsgid).

    A root starter must not open a job's `In`/`Out`/`Err` with root's
    rights: the job ad names those paths. The file-system ids are per
    thread, so hooks running in other threads are not affected.
    """
    if user is None or os.geteuid() != 0:
        yield
        return
    libc = c_library()
    libc.setfsgid(user[1])
    libc.setfsuid(user[0])
    try:
        yield
    finally:
        libc.setfsuid(0)
        libc.setfsgid(0)

