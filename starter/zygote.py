"""The starter zygote: a warm parent that forks one starter per job.

`python -P -m fetchwork.starter.zygote` runs with a unix SOCK_SEQPACKET
socket on fd 0, the other end held by the startd. It imports the starter and
the modules of in-process starter hooks once, says `ready`, then serves one
request per message:

    startd -> zygote   {"op": "spawn", "args": [...]} with two fds (SCM_RIGHTS):
                       the starter's stdin (read end) and stdout (write end)
    zygote -> startd   {"op": "spawned", "pid": N} with a pidfd of the child
                       (none where the OS has no pidfd), or
                       {"op": "error", "error": "..."} when the fork failed
    zygote -> startd   {"op": "exited", "pid": N, "status": S} for every child
                       it reaps (S as subprocess's returncode: -signal if killed)

The zygote has no threads, so fork is safe. A child gets its own session,
default signal handlers, the two pipes on fd 0 and 1, a fresh logging
setup, and runs `fetchwork.starter`'s main as if started on its own; it
leaves through `os._exit` (no interpreter teardown). It starts only once
the zygote has sent its `spawned` reply (a zygote killed in between leaves
a child that exits at once, so a retried request never runs a job twice).
The zygote exits when the startd closes its end.
"""

from __future__ import annotations

import array
import gc
import json
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
from typing import Any

import psutil

from fetchwork.starter.jobprocess import become_subreaper

log = logging.getLogger("fetchwork.starter.zygote")

# Largest request or report; a starter's arguments are a few paths.
MAX_MESSAGE = 65536
# Exit status of a child whose zygote died before letting it start.
ORPHAN_STATUS = 70
_FDS_PER_REQUEST = 2


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
        self.children: set[int] = set()
        # A subreaper: a dead starter's processes come to the zygote, which kills them.
        self.adopts = become_subreaper()
        self._wake_r, self._wake_w = os.pipe()
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
        try:
            if message.get("op") == "spawn" and len(fds) == _FDS_PER_REQUEST:
                self._spawn([str(word) for word in message.get("args", [])], fds)
            else:
                send(self.sock, {"op": "error", "error": "a spawn request needs arguments "
                                                         "and two file descriptors"})
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def _spawn(self, args: list[str], fds: list[int]) -> None:
        if threading.active_count() > 1:  # never fork a process with threads
            send(self.sock, {"op": "error", "error": "the zygote has threads; not forking"})
            return
        # Two one-byte handshakes: the child has its own session before the
        # startd hears of it, and starts only once the startd has heard.
        go_r, go_w = os.pipe()
        set_r, set_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (go_r, go_w, set_r, set_w):
                os.close(fd)
            send(self.sock, {"op": "error", "error": f"fork failed: {exc.strerror or exc}"})
            return
        if pid == 0:
            os.close(go_w)
            os.close(set_r)
            _child(args, fds, (set_w, go_r), self)  # never returns
        os.close(go_r)
        os.close(set_w)
        self.children.add(pid)
        os.read(set_r, 1)  # b"" if the child died first: its exit is reported as usual
        os.close(set_r)
        pidfd = _pidfd(pid)
        try:
            send(self.sock, {"op": "spawned", "pid": pid}, [pidfd] if pidfd is not None else [])
        finally:
            if pidfd is not None:
                os.close(pidfd)
        os.write(go_w, b"g")
        os.close(go_w)

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
        signal.set_wakeup_fd(-1)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self.sock.close()


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


def _child(args: list[str], fds: list[int], handshake: tuple[int, int],
           zygote: Zygote) -> None:
    """In the forked child: become a starter of its own, or leave if the zygote died."""
    code = 2
    set_w, go_r = handshake
    try:
        os.setsid()
        os.write(set_w, b"s")
        os.close(set_w)
        zygote.close_in_child()
        for number in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                       signal.SIGQUIT, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it up in a new process
        stdin_fd, stdout_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        gone = os.read(go_r, 1) == b""
        os.close(go_r)
        if gone:
            os._exit(ORPHAN_STATUS)
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        from fetchwork.starter import launch
        from fetchwork.starter.__main__ import _exit_now, main

        launch.orphans_are_killed = zygote.adopts
        sys.argv = [sys.argv[0], *args]
        _exit_now(main(args))
    except BaseException:  # noqa: BLE001 - a child must never return into the zygote
        try:
            logging.getLogger("fetchwork.starter").exception("the forked starter failed")
        finally:
            os._exit(code)
    os._exit(code)


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


def _preload() -> None:
    """Import what every starter needs, and the modules of in-process starter hooks."""
    from fetchwork.config import keywords
    from fetchwork.config.loader import Config
    from fetchwork.errors import FetchworkError
    from fetchwork.hooks import inprocess
    from fetchwork.starter import __main__ as entry
    from fetchwork.starter import rehearsal, starter  # noqa: F401 - imported ahead on purpose
    from fetchwork.starter.launch import c_library, thread_id_calls

    entry.argument_parser()
    c_library()
    thread_id_calls()
    _warm_up()
    try:
        config = Config.load()  # remembered: a starter's own load is then a few stats
        values = keywords.starter_hook_values(config)
    except FetchworkError:
        return  # each starter reports configuration errors itself
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
    _preload()
    # Objects made so far stay out of the collector's reach: forked
    # starters then share their pages with the zygote instead of copying them.
    gc.freeze()
    return Zygote(sock).serve()


if __name__ == "__main__":
    sys.exit(main())
