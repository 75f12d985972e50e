"""The starter zygote: a warm parent that forks the starters, some ahead of their jobs.

`python -P -m fetchwork.starter.zygote` runs with a unix SOCK_SEQPACKET
socket on fd 0, the other end held by the startd. It imports the starter and
the modules of in-process starter hooks once, says `ready`, then serves one
request per message:

    startd -> zygote   {"op": "spawn", "args": [...]} with two fds (SCM_RIGHTS):
                       the starter's stdin (read end) and stdout (write end)
    zygote -> startd   {"op": "spawned", "pid": N, "keep": K} with a pidfd of the
                       child (none where the OS has no pidfd) and, when the request
                       had "keep": true, the child's socket after it, or
                       {"op": "error", "error": "..."} when the fork failed
    startd -> zygote   {"op": "ahead"}: fork a starter ahead of its job
    zygote -> startd   {"op": "forked", "pid": N} with the startd's end of the
                       child's socket and a pidfd, or {"op": "forked", "error": "..."}
    zygote -> startd   {"op": "exited", "pid": N, "status": S} for every child
                       it reaps (S as subprocess's returncode: -signal if killed)

Every starter is a fork that waits on a socket of its own for its job:
{"op": "job", "args": [...], "last": L} with the two fds of a spawn request.
A starter may run several jobs in turn (STARTER_JOBS_PER_PROCESS): after a
job that is not its last it answers {"op": "done", "status": S} (S: what its
main returned) on that socket, removes the job's sandbox (after the word, so
that the startd fetches meanwhile) and waits there for the next one; after its
last job, or one it failed at (S not 0), it exits with S, as a starter of
one job does. For a spawn
request the zygote forks one and gives it the job once it has sent its
`spawned` reply (a zygote killed in between leaves a child that exits at
once, so a retried request never runs a job twice). A fork made ahead is
handed to the startd, which gives it a job itself when one comes, with no
round trip through the zygote. While a fork waits, it does what every job's
start would otherwise do first (`_while_waiting`). It leaves when its socket
closes before a job came, and dies with the zygote (the parent-death
signal, until it has a job).

The zygote has no threads, so fork is safe. A child gets its own session
(before the startd hears of it), default signal handlers, a fresh logging
setup; given its job, the two pipes on fd 0 and 1, and it runs
`fetchwork.starter`'s main as if started on its own; it leaves through
`os._exit` (no interpreter teardown). The zygote exits when the startd closes
its end; starters with jobs keep running.
"""

from __future__ import annotations

import array
import gc
import json
import logging
import os
import select
import selectors
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import psutil

from fetchwork.config import latencytrace
from fetchwork.starter.jobprocess import become_subreaper

if TYPE_CHECKING:
    from fetchwork.config.loader import Config

log = logging.getLogger("fetchwork.starter.zygote")

# Largest request or report; a starter's arguments are a few paths.
MAX_MESSAGE = 65536
# Exit status of a child whose zygote died before giving it a job.
ORPHAN_STATUS = 70
_FDS_PER_REQUEST = 2
_PR_SET_PDEATHSIG = 1
# The hook threads a waiting starter starts: an in-process hook's call, the
# watch on its timeout, and a third for the reference prepare hook's lease keeper.
HOOK_THREADS = 3


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message, with `fds` passed alongside (SCM_RIGHTS)."""
    data = json.dumps(message).encode("utf-8")
    ancillary = []
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    sock.sendmsg([data], ancillary)


def receive(sock: socket.socket, max_fds: int = _FDS_PER_REQUEST
            ) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the fds that came with it; (None, []) at EOF."""
    size = socket.CMSG_SPACE(max_fds * array.array("i").itemsize)
    data, ancillary, _flags, _addr = sock.recvmsg(MAX_MESSAGE, size)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(payload[:len(payload) - len(payload) % received.itemsize])
            fds += list(received)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    message = json.loads(data.decode("utf-8"))
    if not isinstance(message, dict):
        for fd in fds:
            os.close(fd)
        raise ValueError("a zygote message must be a JSON object")
    return message, fds


def returncode(wait_status: int) -> int:
    """A waitpid status as subprocess shows it (negative: killed by that signal)."""
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


class Zygote:
    """The serving loop over the startd's socket and a SIGCHLD wake-up pipe."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pid = os.getpid()
        self.children: set[int] = set()  # every fork, reported when reaped
        # A subreaper: a dead starter's processes come to the zygote, which kills them.
        self.adopts = become_subreaper()
        self._wake_r, self._wake_w = os.pipe()
        # The descriptors of the request being served (a starter that runs further
        # jobs would otherwise hold one job's pipes open for good).
        self._held: list[int] = []
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def serve(self) -> int:
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda _n, _f: None)
        # The startd decides when starters stop; a terminal's Ctrl-C is its to handle.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ, "request")
        selector.register(self._wake_r, selectors.EVENT_READ, "child")
        send(self.sock, {"op": "ready", "pid": os.getpid()})
        while True:
            for key, _mask in selector.select():
                if key.data == "child":
                    _drain(self._wake_r)
                elif not self._request():
                    self._reap()
                    return 0
            self._reap()

    def _request(self) -> bool:
        """Serve one message; False when the startd has gone."""
        try:
            message, fds = receive(self.sock)
        except (OSError, ValueError) as exc:
            log.error("zygote: unreadable request: %s", exc)
            return not isinstance(exc, ConnectionError)
        if message is None:
            return False
        self._held = fds  # a fork made now must not keep them (`close_in_child`)
        try:
            if message.get("op") == "spawn" and len(fds) == _FDS_PER_REQUEST:
                self._spawn([str(word) for word in message.get("args", [])], fds,
                            keep=bool(message.get("keep")))
            elif message.get("op") == "ahead" and not fds:
                self._fork_ahead()
            else:
                send(self.sock, {"op": "error", "error": "a spawn request needs arguments "
                                                         "and two file descriptors"})
        except ConnectionError:
            # The startd closed its end while this request was served (a fork ahead it
            # asked for before it stopped): it has gone, as an end of its requests says.
            # The child's socket is closed with it, so a fork made meanwhile ends too.
            return False
        finally:
            self._held = []
            for fd in fds:
                os.close(fd)
        return True

    def _spawn(self, args: list[str], fds: list[int], keep: bool = False) -> None:
        """Fork a starter and give it the job, once the startd has heard of it; with
        `keep`, the startd gets the child's socket too (after the `spawned` reply's
        pidfd), to give it further jobs."""
        try:
            pid, child = self._fork()
        except OSError as exc:
            send(self.sock, {"op": "error", "error": f"fork failed: {exc.strerror or exc}"})
            return
        try:
            self._announce({"op": "spawned", "pid": pid, "keep": keep}, pid,
                           child.fileno() if keep else None, fd_first=False)
            try:
                send(child, {"op": "job", "args": args, "last": not keep}, fds)
            except OSError:
                pass  # the child died first: its exit is reported as usual
        finally:
            child.close()

    def _fork_ahead(self) -> None:
        """Fork a starter ahead of its job and hand the startd its socket."""
        try:
            pid, child = self._fork()
        except OSError as exc:
            send(self.sock, {"op": "forked", "error": f"fork failed: {exc.strerror or exc}"})
            return
        try:
            self._announce({"op": "forked", "pid": pid}, pid, child.fileno())
        finally:
            child.close()  # the startd's copy is the only one: its close is the fork's EOF

    def _announce(self, message: dict[str, Any], pid: int, fd: int | None = None,
                  fd_first: bool = True) -> None:
        """Tell the startd of a new child: `message`, with `fd` and a pidfd of it (in
        that order, or the pidfd first)."""
        pidfd = _pidfd(pid)
        order = (fd, pidfd) if fd_first else (pidfd, fd)
        try:
            send(self.sock, message, [f for f in order if f is not None])
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _fork(self) -> tuple[int, socket.socket]:
        """A new child, with its own session, waiting on its socket for a job.
        Raises OSError when the fork fails."""
        if threading.active_count() > 1:  # never fork a process with threads
            raise OSError("the zygote has threads; not forking")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            ours.close()
            _child(theirs, self)  # never returns
        theirs.close()
        self.children.add(pid)
        try:  # its own session before the startd hears of it (nothing if it died first)
            receive(ours)
        except (OSError, ValueError):
            pass
        return pid, ours

    def _reap(self) -> None:
        """Reap every child that ended: report starters; kill what dead ones left."""
        reaped = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                break
            reaped = True
            if pid not in self.children:
                continue  # an adopted process of a dead starter's job
            self.children.discard(pid)
            try:
                send(self.sock, {"op": "exited", "pid": pid, "status": returncode(status)})
            except OSError:
                pass  # the startd is gone; keep reaping
        if reaped:
            self._kill_adopted()

    def _kill_adopted(self) -> None:
        """SIGKILL every child that is not a starter: the zygote is a subreaper, so
        a starter's job (and the job's children, as each parent dies) comes here
        when the starter dies, and must not outlive it (a starter forked by the
        zygote spawns its job without the parent-death signal)."""
        for pid in _children_of(os.getpid()):
            if pid not in self.children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def close_in_child(self) -> None:
        """In a forked child: let go of the zygote's descriptors (fd 0, the startd's
        socket, becomes /dev/null: nothing opened meanwhile may take its number)."""
        signal.set_wakeup_fd(-1)
        for fd in (self._wake_r, self._wake_w, *self._held):
            os.close(fd)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, self.sock.detach())
        os.close(null)


def _children_of(pid: int) -> list[int]:
    """The pids of `pid`'s children (Linux: /proc/PID/task/PID/children)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(word) for word in handle.read().split()]
    except (OSError, ValueError):
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _readable(sock: socket.socket, timeout_s: float = 0.0) -> bool:
    """Whether `sock` has something to read (or is at its end) within `timeout_s`."""
    return bool(select.select([sock], [], [], timeout_s)[0])


def _child(sock: socket.socket, zygote: Zygote) -> None:
    """In the forked child: wait for a job and become its starter, or leave when
    its socket closes (or the zygote dies) before a job came."""
    code = 2
    try:
        os.setsid()
        _die_with(zygote.pid)
        send(sock, {"op": "session"})
        zygote.close_in_child()
        for number in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                       signal.SIGQUIT, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it up in a new process
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        from fetchwork.starter import __main__ as entry
        from fetchwork.starter import launch

        entry.log_to_stderr("starter[standby]")
        try:
            _while_waiting(sock)
        except Exception:  # noqa: BLE001 - the job's own start reports what it meets
            log.warning("a starter waiting for its job could not prepare for it", exc_info=True)
        launch.orphans_are_killed = zygote.adopts
        _run_jobs(sock, zygote.pid, entry)
    except BaseException:  # noqa: BLE001 - a child must never return into the zygote
        try:
            logging.getLogger("fetchwork.starter").exception("the forked starter failed")
        finally:
            os._exit(code)
    os._exit(code)


def _run_jobs(sock: socket.socket, zygote_pid: int, entry: Any) -> None:
    """Run the jobs that come on `sock`, one at a time, until one is the last
    (`"last": true`, or a job that ended with the starter failing) or the socket
    closes; never returns. Between two jobs the starter lets go of the last one's
    pipes (its end of the event stream closed, `/dev/null` on fd 0), says `done`
    with the job's exit status on the socket, removes the job's sandbox, and dies
    with the zygote again."""
    ran = 0
    while True:
        message, fds = receive(sock)
        latencytrace.mark("starter.received")
        if message is None or message.get("op") != "job" or len(fds) != _FDS_PER_REQUEST:
            for fd in fds:
                os.close(fd)
            os._exit(ORPHAN_STATUS if ran == 0 else 0)  # let go before (another) job came
        last = bool(message.get("last", True))
        if last:
            sock.close()
        _die_with(None)
        stdin_fd, stdout_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        args = [str(word) for word in message.get("args", [])]
        sys.argv = [sys.argv[0], *args]
        code = entry.main(args, leave_sandbox=True)
        ran += 1
        if last or code != 0:  # a starter that failed is never given another job
            entry.exit_now(code)  # the sandbox removed first
        _between_jobs()
        send(sock, {"op": "done", "status": code})
        latencytrace.mark("starter.done_sent")
        # The job's sandbox goes now, while the startd fetches the next job (the
        # startd removes it at the slot's next job if this starter died first).
        entry.remove_left()
        _die_with(zygote_pid)


def _between_jobs() -> None:
    """What a job leaves in a starter that runs another: fd 0 and 1 back on
    /dev/null (the job's control pipe and any copy of its event pipe let go),
    the log's name back to a waiting starter's."""
    from fetchwork.starter import __main__ as entry

    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    entry.log_to_stderr("starter[standby]")




def _die_with(zygote_pid: int | None) -> None:
    """SIGKILL this fork when the zygote `zygote_pid` dies, or no longer (None). A
    fork still without a job goes with its zygote (whoever holds its socket may be
    slow to see that the zygote is gone); a starter with a job outlives it."""
    from fetchwork.starter.launch import c_library

    try:
        c_library().prctl(_PR_SET_PDEATHSIG, 0 if zygote_pid is None else int(signal.SIGKILL),
                          0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if zygote_pid is not None and os.getppid() != zygote_pid:  # it died before the call
        os._exit(ORPHAN_STATUS)


def _while_waiting(sock: socket.socket) -> None:
    """What every job's start would do first, done while no job has come (each
    step only while none has): hook threads started, `prepare_standby()` of
    the in-process hook modules of the keywords this machine's slots use (the
    reference hooks connect to the broker), and once it has waited IDLE_S, a
    rehearsal of the start path (rehearsal.py). A fork made for a job at hand
    skips them all. Configuration errors are left to the job's own start to report."""
    from fetchwork.config import keywords
    from fetchwork.config.loader import Config
    from fetchwork.errors import FetchworkError
    from fetchwork.hooks import inprocess
    from fetchwork.hooks.workers import WORKERS
    from fetchwork.starter import rehearsal

    if _readable(sock):
        return
    WORKERS.warm(HOOK_THREADS)
    if _readable(sock):
        return
    try:
        config = Config.load()
        failed = inprocess.preload(keywords.starter_hook_values(config))
        used = [keywords.hook_value(config, keyword, hook)
                for keyword, hook in keywords.starter_hooks(config)]
    except FetchworkError:
        return
    inprocess.prepare_modules([value for value in used if value], "prepare_standby", failed)
    if not _readable(sock, rehearsal.IDLE_S):
        rehearsal.rehearse(config, lambda: _readable(sock))


def _warm_up() -> None:
    """Do once here what each forked starter's first call would do again for its job:
    the C library loads its name-service modules at the first account lookup (a
    missing name goes through all of them), the time zone is read at the first
    local time, the ad parser and formatter fill their caches at first use."""
    from fetchwork.config import ads
    from fetchwork.starter import rehearsal, runas

    runas.lookup_account(runas.FALLBACK_USER)
    runas.lookup_account("fetchwork-no-such-user")
    time.localtime()
    ads.first_of_pair(ads.join_pair(*rehearsal.sample_ads()))


def _warm_signature_check(config: Config) -> None:
    """Read the pool's public key here, and verify one signature with it (a wrong one),
    so that each starter finds the key read and the crypto library's tables for
    Ed25519 set up in the pages it shares with the zygote, rather than making them
    again in its own memory (some 0.4 MB a starter). A key that cannot be read is left
    to each job's check to report."""
    from cryptography.exceptions import InvalidSignature

    from fetchwork.errors import ConfigError
    from fetchwork.starter import jobsignature

    try:
        key = jobsignature.public_key(config)
    except ConfigError:
        return
    if key is None:
        return
    try:
        key.verify(bytes(64), b"")
    except InvalidSignature:
        pass


def preload() -> None:
    """Import what every starter needs, and the modules of in-process starter hooks."""
    from fetchwork.config import keywords
    from fetchwork.config.loader import Config
    from fetchwork.errors import FetchworkError
    from fetchwork.hooks import inprocess
    from fetchwork.starter import __main__ as entry
    from fetchwork.starter import starter  # noqa: F401 - imported ahead on purpose
    from fetchwork.starter.launch import c_library, thread_id_calls
    from fetchwork.starter.transferstep import preload as preload_transfer

    entry.argument_parser()
    preload_transfer()  # a transfer child is a fork: it imports nothing per job
    c_library()
    thread_id_calls()
    _warm_up()
    try:
        config = Config.load()  # remembered: a starter's own load is then a few stats
        values = keywords.starter_hook_values(config)
    except FetchworkError:
        return  # each starter reports configuration errors itself
    _warm_signature_check(config)
    # A hook module may ask to do more ahead of the forks (`prepare_fork()`).
    inprocess.prepare_modules(values, "prepare_fork", inprocess.preload(values))


def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s starter-zygote %(levelname)s %(message)s")
    try:
        sock = socket.socket(fileno=0)
    except OSError as exc:
        log.error("the zygote expects a unix socket on its stdin: %s", exc)
        return 2
    preload()
    # Objects made so far stay out of the collector's reach: forked
    # starters then share their pages with the zygote instead of copying them.
    gc.freeze()
    return Zygote(sock).serve()


if __name__ == "__main__":
    sys.exit(main())
