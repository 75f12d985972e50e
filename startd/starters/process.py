"""One starter process as the startd sees it: spawn, control lines, JSON-line events.

The startd writes the job ad and the slot ad into the sandbox (`.job.ad`,
`.machine.ad`) and runs `python -m fetchwork.starter` with pipes on stdin and
stdout. Control words go down stdin one per line; events come back one JSON
object per line on stdout. The starter's stderr is the startd's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.protocol import CONTROL_WORDS, JOB_AD_FILE, MACHINE_AD_FILE, STANDBY_FLAG
from fetchwork.errors import StarterError
from fetchwork.hooks.pipes import open_pidfd, read_available

from .sandboxes import Sandboxes
from .zygoteclient import ForkedStarter, ZygoteClient

log = logging.getLogger(__name__)



class StarterProcess:
    """A spawned starter: its pipes, its events so far, and how to stop it."""

    def __init__(self, proc: subprocess.Popen[bytes] | ForkedStarter, sandbox: str,
                 slot_id: int):
        self.proc = proc
        self.sandbox = sandbox
        self.slot_id = slot_id
        self.pid = proc.pid
        self.exit_how: str | None = None
        self.final_ad: dict[str, Any] | None = None
        self.stdout_closed = False
        self._partial = b""
        # A forked starter comes with the zygote's pidfd (no race with pid reuse).
        self.pidfd = proc.pidfd if isinstance(proc, ForkedStarter) else open_pidfd(proc.pid)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)

    @classmethod
    def spawn(cls, slot_id: int, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
              sandboxes: Sandboxes, keyword: str | None,
              env: Mapping[str, str] | None = None,
              standby: StandbyStarters | None = None) -> StarterProcess:
        """Make the sandbox with both ads in it and start the starter
        (forked by the zygote, or a standby one, when `standby` is given)."""
        try:
            sandbox = sandboxes.make(slot_id, ads.format_ad(job_ad), ads.format_ad(slot_ad))
        except OSError as exc:
            where = exc.filename or sandboxes.execute_dir
            raise StarterError(f"cannot set up the sandbox {where}: {exc.strerror or exc} "
                               f"(check EXECUTE)") from exc
        args = ["--job-ad", os.path.join(sandbox, JOB_AD_FILE),
                "--slot-ad", os.path.join(sandbox, MACHINE_AD_FILE),
                "--slot", str(slot_id), "--sandbox", sandbox]
        if keyword:
            args += ["--keyword", keyword]
        try:
            if standby is not None and env is None:
                proc = standby.take(args) or standby.start(args)
            else:
                proc = _popen_starter(args, env)
        except OSError as exc:
            shutil.rmtree(sandbox, ignore_errors=True)
            raise StarterError(f"cannot start the starter: {exc.strerror or exc}") from exc
        except StarterError:
            shutil.rmtree(sandbox, ignore_errors=True)
            raise
        return cls(proc, sandbox, slot_id)

    # -- events --------------------------------------------------------------

    def fileno(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def read_events(self) -> list[dict[str, Any]]:
        """Every complete event line available now; sets `stdout_closed` at EOF."""
        events: list[dict[str, Any]] = []
        while not self.stdout_closed:
            chunk = read_available(self.fileno())
            if chunk is None:
                break
            if not chunk:
                self.stdout_closed = True
                break
            self._partial += chunk
        *lines, self._partial = self._partial.split(b"\n")
        if self.stdout_closed and self._partial:
            lines.append(self._partial)
            self._partial = b""
        for line in lines:
            event = _parse_event(line, self.pid)
            if event is None:
                continue
            if event.get("event") == "exited":
                self.exit_how = str(event.get("how") or "")
                ad = event.get("ad")
                self.final_ad = ad if isinstance(ad, dict) else None
            events.append(event)
        return events

    # -- control -------------------------------------------------------------

    def send(self, word: str) -> None:
        """Write one control word; a starter that is gone is not an error."""
        assert word in CONTROL_WORDS, word
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(word.encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def signal(self, signum: int) -> None:
        if self.proc.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill_hard(self) -> None:
        """SIGKILL the starter's whole process group."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.signal(signal.SIGKILL)

    def poll(self) -> int | None:
        return self.proc.poll()

    def close(self) -> None:
        """Release pipes and the pidfd; remove the sandbox if the starter left it behind."""
        if isinstance(self.proc, ForkedStarter):
            self.proc.close()  # its pipes and its pidfd
        else:
            _close_pipes(self.proc)
            if self.pidfd is not None:
                os.close(self.pidfd)
        self.pidfd = None
        # HTCondor's startd also cleans an execute directory its starter left.
        shutil.rmtree(self.sandbox, ignore_errors=True)


def _popen_starter(args: list[str], env: Mapping[str, str] | None = None
                   ) -> subprocess.Popen[bytes]:
    # Its own session: a terminal's Ctrl-C reaches the startd, which decides.
    return subprocess.Popen([sys.executable, "-P", "-m", "fetchwork.starter", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(env) if env is not None else None,
                            close_fds=True, start_new_session=True)


Starter = subprocess.Popen[bytes] | ForkedStarter


class StandbyStarters:
    """Starters started ahead of need (`STARTER_STANDBY` of them), and the way to start one.

    A starter that has just been started (a new Python, seconds of imports,
    or a fork of the zygote, milliseconds of page copying) is not ready to
    run a job; a standby one is, and waits for its arguments on stdin
    (`python -m fetchwork.starter --standby`), so a fetched job starts at
    once. With a zygote (`STARTER_ZYGOTE`) the standby starters are its
    forks, made once it is ready and only while they are its own (a starter
    of a zygote that died is let go: the zygote kills what a dead starter
    leaves). One that died while waiting is replaced.
    """

    def __init__(self, count: int, zygote: ZygoteClient | None = None):
        self.count = max(0, count)
        self.zygote = zygote
        self._ready: list[Starter] = []

    def waiting(self) -> list[Starter]:
        """The standby starters (oldest first)."""
        return list(self._ready)

    def start(self, args: list[str]) -> Starter:
        """A new starter given `args` (StarterError when none can be started)."""
        if self.zygote is not None:
            return self.zygote.spawn(args)
        try:
            return _popen_starter(args, None)
        except OSError as exc:
            raise StarterError(f"cannot start the starter: {exc.strerror or exc}") from exc

    def _usable(self, proc: Starter) -> bool:
        if proc.poll() is not None:
            return False
        return not isinstance(proc, ForkedStarter) or (
            self.zygote is not None and self.zygote.alive()
            and proc.zygote_pid == self.zygote.pid)

    def refill(self) -> None:
        if self.zygote is not None:
            self.zygote.refill()
        for proc in [proc for proc in self._ready if not self._usable(proc)]:
            _let_go(proc)
            self._ready.remove(proc)
        while len(self._ready) < self.count:
            if self.zygote is not None and not self.zygote.ready():
                return  # a fresh zygote is still importing: not worth waiting for
            try:
                self._ready.append(self.start([STANDBY_FLAG]))
            except StarterError as exc:
                log.warning("cannot start a standby starter: %s", exc)
                return

    def take(self, args: list[str]) -> Starter | None:
        """A ready starter given `args`, or None when none is ready."""
        while self._ready:
            proc = self._ready.pop(0)
            if not self._usable(proc):
                _let_go(proc)
                continue
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(args).encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                proc.kill()
                _let_go(proc)
                continue
            return proc
        return None

    def close(self) -> None:
        """Let every waiting starter go: EOF before arguments makes it exit 0."""
        ready, self._ready = self._ready, []
        for proc in ready:
            _let_go(proc)
        if self.zygote is not None:
            self.zygote.close()


def _let_go(proc: Starter) -> None:
    """Close `proc`'s pipes (a standby starter exits at EOF) and reap it."""
    _close_pipes(proc)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("standby starter %s survived SIGKILL", proc.pid)
    if isinstance(proc, ForkedStarter):
        proc.close()


def _close_pipes(proc: Starter) -> None:
    """Close the parent's ends of `proc`'s pipes."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def _parse_event(line: bytes, pid: int) -> dict[str, Any] | None:
    text = line.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        event = json.loads(text)
    except ValueError:
        log.warning("starter %s wrote a line that is not an event: %.200s", pid, text)
        return None
    if not isinstance(event, dict):
        log.warning("starter %s wrote a line that is not an event: %.200s", pid, text)
        return None
    return event
