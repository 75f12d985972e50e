"""The startd's side of the starter zygote: ask it for starters, hear how they end.

The zygote (`fetchwork.starter.zygote`) is a child of the startd holding one
end of a unix SOCK_SEQPACKET pair on its fd 0. `spawn` makes the starter's
two pipes and gives them, with the job's arguments, to a starter the zygote
forked ahead (`keep_ahead`: the zygote hands over the socket such a fork
waits on, with a pidfd of it), straight over that socket; with none waiting,
it passes them to the zygote and waits for the reply: the starter's pid and
a pidfd for it. The zygote reaps its children and
reports their exit status; `fileno()` is readable when a report waits, and
`read_reports` takes them. A starter may run several jobs of its slot in
turn (`jobs_per_process`, STARTER_JOBS_PER_PROCESS): the startd keeps its
socket, hears its `done` after each job (`ForkedStarter.poll`), takes it back
for the slot's next job (`take_back`) and tells it which job is its last. A
zygote found dead is started again and the
request retried once (the forks it made ahead are let go); a zygote that
cannot fork answers with an error that `spawn` raises as StarterError, so
the caller can give the job back. A starter orphaned by a dead zygote is
still seen to end (its pidfd), with its status unknown (`STATUS_UNKNOWN`).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from fetchwork.config import latencytrace
from fetchwork.errors import StarterError
from fetchwork.starter import proctree
from fetchwork.starter.zygote import receive, send

log = logging.getLogger(__name__)

ZYGOTE_MODULE = "fetchwork.starter.zygote"
# Exit status reported for a starter whose zygote died before reaping it.
STATUS_UNKNOWN = 256
# Longest wait for the zygote's report of a starter whose pidfd says it ended.
REPORT_WAIT_S = 2.0
# Longest wait for a reply: a fresh zygote imports the starter and the
# in-process hooks' modules first (seconds on a loaded machine).
REPLY_TIMEOUT_S = 60.0


class ZygoteGone(StarterError):
    """The zygote exited or closed its socket."""


@dataclass
class Waiting:
    """A starter the zygote forked ahead: it waits on `sock` for its job."""

    pid: int
    pidfd: int | None
    sock: socket.socket
    zygote_pid: int
    # Jobs it ran before (a starter back from a job, STARTER_JOBS_PER_PROCESS > 1).
    jobs_run: int = 0

    def ended(self) -> bool:
        return _gone(self.pid, self.pidfd)

    def let_go(self, wait_s: float = 0.0) -> None:
        """Close its socket (it leaves at EOF); wait up to `wait_s` for it to leave,
        then SIGKILL it."""
        self.sock.close()
        if wait_s > 0 and self.pidfd is not None:
            select.select([self.pidfd], [], [], wait_s)
        if wait_s > 0 and not self.ended():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


@dataclass
class ForkedStarter:
    """A starter the zygote forked: its pid, pidfd and the startd's ends of its pipes.

    It answers `poll`, `wait`, `kill` and `returncode` as a subprocess.Popen
    would, through the client that learns its exit status from the zygote.
    """

    pid: int
    pidfd: int | None
    stdin: IO[bytes]
    stdout: IO[bytes]
    zygote_pid: int
    client: ZygoteClient | None = None
    returncode: int | None = None
    # The socket it takes its next job on (None: this job is its last), and how
    # many jobs it has been given, this one included.
    sock: socket.socket | None = None
    jobs_run: int = 1
    # True once it said `done`: the job is over and the starter waits for another.
    between_jobs: bool = False
    # Set by its reader at the end of its event stream: `done` follows at once.
    events_ended: bool = False

    def poll(self) -> int | None:
        if self.returncode is None and self.sock is not None:
            self._hear_done(REPORT_WAIT_S if self.events_ended else 0.0)
        if self.returncode is None and self.client is not None:
            self.returncode = self.client.exit_status(self, wait_s=REPORT_WAIT_S)
        return self.returncode

    def _hear_done(self, wait_s: float) -> None:
        """Take its `done` (waiting up to `wait_s` once its event stream has ended:
        the word follows the stream's end at once, unless the starter died)."""
        assert self.sock is not None
        watched: list[Any] = [self.sock] + ([self.pidfd] if self.pidfd is not None else [])
        readable, _w, _x = select.select(watched, [], [], wait_s)
        if self.sock not in readable:
            return
        try:
            message, fds = receive(self.sock)
        except (OSError, ValueError):
            message, fds = None, []
        for fd in fds:
            os.close(fd)
        if message is not None and message.get("op") == "done":
            self.returncode = int(message.get("status", 0))
            self.between_jobs = True
        else:  # it let go of its socket: it is ending, its exit is reported as usual
            self.sock.close()
            self.sock = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            remaining_s = None if deadline is None else deadline - time.monotonic()
            if remaining_s is not None and remaining_s <= 0:
                raise subprocess.TimeoutExpired(f"starter {self.pid}", timeout or 0.0)
            _wait_ended(self, min(remaining_s if remaining_s is not None else 0.05, 0.05))
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Close the startd's ends of the pipes, the pidfd and its socket (a starter
        not taken back for another job leaves when it sees the socket close)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        for stream in (self.stdin, self.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class ZygoteClient:
    """Owns one zygote process at a time; re-creates it when it has died."""

    def __init__(self, command: Sequence[str] | None = None,
                 env: Mapping[str, str] | None = None,
                 reply_timeout_s: float = REPLY_TIMEOUT_S):
        self.command = list(command) if command else [sys.executable, "-P", "-m", ZYGOTE_MODULE]
        self.env = dict(env) if env is not None else None
        self.reply_timeout_s = reply_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.starts = 0
        self._statuses: dict[int, int] = {}
        self._pending: list[tuple[int, int]] = []
        self._waiting: list[Waiting] = []  # forked ahead, oldest first
        # Starters back from a job, waiting for their slot's next one, by slot.
        self._kept: dict[int, Waiting] = {}
        # STARTER_JOBS_PER_PROCESS: jobs a starter runs before it is replaced.
        self.jobs_per_process = 1
        self._asked = 0  # forks ahead asked of this zygote and not yet reported

    # -- the zygote process ----------------------------------------------------

    def start(self) -> None:
        """Start a zygote (without waiting for it to be ready)."""
        self._discard()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # Its own session: a terminal's Ctrl-C reaches the startd, which decides.
            self.proc = subprocess.Popen(self.command, stdin=theirs.fileno(),
                                         stdout=subprocess.DEVNULL, env=self.env,
                                         close_fds=True, start_new_session=True)
        except OSError as exc:
            ours.close()
            raise StarterError(f"cannot start the starter zygote: {exc.strerror or exc}") from exc
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self._asked = 0
        self.starts += 1
        log.debug("starter zygote %s started", self.proc.pid)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.sock is not None and self.proc.poll() is None

    def fileno(self) -> int | None:
        """The socket to watch for exit reports (None while no zygote runs)."""
        return self.sock.fileno() if self.sock is not None else None

    def waiting(self) -> list[int]:
        """The pids of the starters forked ahead that wait for a job (oldest first)."""
        self._drain()
        return [fork.pid for fork in self._waiting]

    def _discard(self, wait_s: float = 0.0) -> None:
        """Forget the current zygote: let its forks ahead go (waiting up to `wait_s`
        for them), close its socket, reap it (it exits at EOF)."""
        if self.sock is not None:
            self._drain()
        waiting, self._waiting = self._waiting, []
        waiting += list(self._kept.values())
        self._kept = {}
        deadline = time.monotonic() + wait_s
        for fork in waiting:
            fork.let_go(max(0.0, deadline - time.monotonic()) if wait_s else 0.0)
            self._statuses.pop(fork.pid, None)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """Stop the zygote and the starters it forked ahead; starters with jobs keep
        running (they are their own sessions)."""
        self._discard(wait_s=5.0)

    def refill(self) -> None:
        """Have a zygote running (started now if none is), without waiting for it."""
        if not self.alive():
            if self.proc is not None:
                log.warning("the starter zygote %s is gone (%s); starting another",
                            self.proc.pid, _how(self.proc))
            self.start()

    # -- starting a starter ------------------------------------------------------

    def keep_ahead(self, count: int) -> None:
        """Have `count` starters forked ahead of their jobs (a zygote started now if
        none runs); the forks are asked for, not waited for."""
        self.refill()
        self._drain()
        for fork in [fork for fork in self._waiting if fork.ended()]:
            self._waiting.remove(fork)
            self._let_go(fork)  # died while waiting: replaced below
        while len(self._waiting) + self._asked < count:
            assert self.sock is not None
            try:
                send(self.sock, {"op": "ahead"})
            except OSError as exc:  # full (a zygote still importing) or gone: asked again later
                log.debug("the starter zygote did not take a request to fork ahead: %s", exc)
                return
            self._asked += 1

    def spawn(self, args: Sequence[str], slot_id: int | None = None) -> ForkedStarter:
        """A starter running `python -m fetchwork.starter <args>`: the one slot
        `slot_id` kept from its last job when it has one, else one forked ahead when
        one waits (or is being forked), else one forked now.

        Raises StarterError when the zygote cannot fork or cannot be started.
        """
        # A zygote found gone first: its kept starters die with it (each was told to
        # at the zygote's death, and may not have run since), so none of them is given
        # the job; the new zygote's are.
        self.refill()
        kept = self._give_kept(args, slot_id)
        if kept is not None:
            return kept
        for attempt in (1, 2):
            try:
                return self._give_waiting(args) or self._request(args)
            except ZygoteGone as exc:
                if attempt == 2:
                    raise StarterError(f"the starter zygote failed twice: {exc}") from exc
                log.warning("the starter zygote went away during a request (%s); "
                            "retrying with a new one", exc)
                self._kill()
                self.refill()
        raise AssertionError("unreachable")

    def _give_waiting(self, args: Sequence[str]) -> ForkedStarter | None:
        """Give the job to the oldest starter forked ahead, or None when none waits.
        A fork asked for and not yet reported is waited for: the zygote makes it
        before any other."""
        self._drain()
        if not self._waiting and self._asked:
            self._await_forked()
        while self._waiting:
            given = self._give_to(self._waiting.pop(0), args)
            if given is not None:
                return given
        return None

    def _give_kept(self, args: Sequence[str], slot_id: int | None) -> ForkedStarter | None:
        """Give the job to the starter slot `slot_id` kept from its last job, if any."""
        fork = self._kept.pop(slot_id, None) if slot_id is not None else None
        return self._give_to(fork, args) if fork is not None else None

    def _give_to(self, fork: Waiting, args: Sequence[str]) -> ForkedStarter | None:
        """Hand the job to a waiting starter (its last when it has run
        STARTER_JOBS_PER_PROCESS with it); None when it is gone (it is let go)."""
        if fork.zygote_pid != self.pid or fork.ended():
            self._let_go(fork)
            return None
        jobs_run = fork.jobs_run + 1
        last = jobs_run >= self.jobs_per_process
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            send(fork.sock, {"op": "job", "args": list(args), "last": last},
                 [stdin_r, stdout_w])
        except OSError:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            self._let_go(fork)
            return None
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        latencytrace.mark("startd.sent")
        if last:
            fork.sock.close()
        os.set_blocking(stdout_r, False)
        return ForkedStarter(pid=fork.pid, pidfd=fork.pidfd,
                             stdin=_unbuffered(stdin_w, "wb"), stdout=_unbuffered(stdout_r, "rb"),
                             zygote_pid=fork.zygote_pid, client=self,
                             sock=None if last else fork.sock, jobs_run=jobs_run)

    def take_back(self, slot_id: int, starter: ForkedStarter) -> bool:
        """Keep a starter that finished a job and waits for another, for slot
        `slot_id`'s next job; False (nothing taken) when it does not wait."""
        if not starter.between_jobs or starter.sock is None or starter.zygote_pid != self.pid:
            return False
        old = self._kept.pop(slot_id, None)
        if old is not None:
            self._let_go(old)
        self._kept[slot_id] = Waiting(starter.pid, starter.pidfd, starter.sock,
                                      starter.zygote_pid, starter.jobs_run)
        starter.pidfd, starter.sock = None, None
        return True

    def let_go_kept(self, slot_id: int) -> None:
        """Let the starter slot `slot_id` kept go (the slot is gone)."""
        fork = self._kept.pop(slot_id, None)
        if fork is not None:
            self._let_go(fork)

    def kept(self) -> dict[int, int]:
        """The pids of the starters kept for their slot's next job, by slot."""
        return {slot_id: fork.pid for slot_id, fork in self._kept.items()}

    def _await_forked(self) -> None:
        """Wait for the report of a fork asked for ahead (or for the zygote's end)."""
        deadline = time.monotonic() + self.reply_timeout_s
        while self._asked and not self._waiting:
            message, fds = self._next(deadline)
            self._note(message, fds)

    def _let_go(self, fork: Waiting) -> None:
        fork.let_go()
        self._statuses.pop(fork.pid, None)

    def _request(self, args: Sequence[str]) -> ForkedStarter:
        assert self.sock is not None and self.proc is not None
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        request = {"op": "spawn", "args": list(args), "keep": self.jobs_per_process > 1}
        try:
            try:
                send(self.sock, request, [stdin_r, stdout_w])
            except BlockingIOError:
                self._writable()
                send(self.sock, request, [stdin_r, stdout_w])
            except OSError as exc:
                raise ZygoteGone(f"cannot write to it: {exc.strerror or exc}") from exc
            reply, fds = self._reply()
        except BaseException:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            raise
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        if reply.get("op") != "spawned":
            for fd in (stdin_w, stdout_r, *fds):
                os.close(fd)
            raise StarterError(f"the starter zygote could not start a starter: "
                               f"{reply.get('error') or reply}")
        os.set_blocking(stdout_r, False)
        sock = None
        if reply.get("keep") and len(fds) == 2:  # the child's socket, after its pidfd
            sock = socket.socket(fileno=fds.pop())
            os.set_inheritable(sock.fileno(), False)
        return ForkedStarter(pid=int(reply["pid"]), pidfd=fds[0] if fds else None,
                             stdin=_unbuffered(stdin_w, "wb"), stdout=_unbuffered(stdout_r, "rb"),
                             zygote_pid=self.proc.pid, client=self, sock=sock)

    def _writable(self) -> None:
        assert self.sock is not None
        _r, w, _x = select.select([], [self.sock], [], self.reply_timeout_s)
        if not w:
            raise ZygoteGone("its socket stayed full")

    def _reply(self) -> tuple[dict[str, Any], list[int]]:
        """Wait for the answer to a spawn request, keeping reports that come first."""
        assert self.sock is not None
        deadline = time.monotonic() + self.reply_timeout_s
        while True:
            message, fds = self._next(deadline)
            if message.get("op") in ("spawned", "error"):
                return message, fds
            self._note(message, fds)

    def _next(self, deadline: float) -> tuple[dict[str, Any], list[int]]:
        assert self.sock is not None
        while True:
            try:
                message, fds = receive(self.sock)
            except BlockingIOError:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    self._kill()
                    raise StarterError(f"the starter zygote did not answer within "
                                       f"{self.reply_timeout_s:g}s; stopped it") from None
                select.select([self.sock], [], [], remaining_s)
                continue
            except (OSError, ValueError) as exc:
                raise ZygoteGone(f"cannot read from it: {exc}") from exc
            if message is None:
                raise ZygoteGone("it closed its socket")
            return message, fds

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self._discard()

    # -- how starters end ----------------------------------------------------------

    def _note(self, message: dict[str, Any], fds: list[int]) -> None:
        """Take a report: a starter's exit, or a fork made ahead (its socket and pidfd)."""
        if message.get("op") == "forked":
            self._asked = max(0, self._asked - 1)
            if "pid" in message and fds and self.proc is not None:
                for fd in fds:
                    os.set_inheritable(fd, False)
                pidfd = fds[1] if len(fds) > 1 else None
                self._waiting.append(Waiting(int(message["pid"]), pidfd,
                                             socket.socket(fileno=fds[0]), self.proc.pid))
                return
            log.warning("the starter zygote could not fork a starter ahead: %s",
                        message.get("error") or message)
        elif message.get("op") == "exited":
            pid, status = int(message["pid"]), int(message["status"])
            self._statuses[pid] = status
            self._pending.append((pid, status))
        for fd in fds:
            os.close(fd)

    def _drain(self) -> bool:
        """Take every report waiting on the socket; False when the zygote has gone."""
        if self.sock is None:
            return False
        while True:
            try:
                message, fds = receive(self.sock)
            except BlockingIOError:
                return True
            except (OSError, ValueError):
                return False
            if message is None:
                return False
            self._note(message, fds)

    def read_reports(self) -> list[tuple[int, int]]:
        """(pid, status) of starters reported ended since the last call."""
        if not self._drain() and self.sock is not None:
            self.sock.close()  # EOF: the zygote died; the next spawn starts another
            self.sock = None
        reports, self._pending = self._pending, []
        return reports

    def exit_status(self, starter: ForkedStarter, wait_s: float = 0.0) -> int | None:
        """The starter's exit status, None while it runs (STATUS_UNKNOWN when its
        zygote died before reaping it). With `wait_s`, a starter whose pidfd says
        it ended is waited for that long, for the zygote's report."""
        if starter.pid in self._statuses:
            return self._statuses.pop(starter.pid)
        ours = self.proc is not None and self.proc.pid == starter.zygote_pid
        if ours and self.sock is not None:
            self.read_reports()
            deadline = time.monotonic() + wait_s
            while starter.pid not in self._statuses and self.sock is not None \
                    and wait_s > 0 and _ended(starter):
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    break
                select.select([self.sock], [], [], remaining_s)
                self.read_reports()
            if starter.pid in self._statuses:
                return self._statuses.pop(starter.pid)
            if self.alive():
                return None
        return STATUS_UNKNOWN if _ended(starter) else None


def _wait_ended(starter: ForkedStarter, timeout_s: float) -> None:
    if starter.pidfd is not None:
        select.select([starter.pidfd], [], [], timeout_s)
    else:
        time.sleep(timeout_s)


def _ended(starter: ForkedStarter) -> bool:
    return _gone(starter.pid, starter.pidfd)


def _gone(pid: int, pidfd: int | None) -> bool:
    """Whether process `pid` has ended: its pidfd is readable then, and its entry in
    /proc is gone or a zombie (its parent, the zygote, reaps it). Both are asked: a
    starter killed between two jobs must never be handed the next."""
    if pidfd is not None and select.select([pidfd], [], [], 0)[0]:
        return True
    try:
        found = proctree.state_and_start(pid)
        return found is None or found[0] == "Z"
    except OSError:  # no /proc here: ask the kernel whether the pid is taken
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _unbuffered(fd: int, mode: str) -> IO[bytes]:
    """A starter's pipe end as a file without a buffer: the events are read with
    plain reads and each control word is one write, and a buffered file costs
    three more system calls to make, per job."""
    return os.fdopen(fd, mode, buffering=0)


def _how(proc: subprocess.Popen[bytes]) -> str:
    code = proc.poll()
    if code is None:
        return "its socket closed"
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"
