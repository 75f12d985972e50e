"""One starter process as the startd sees it: spawn, control lines, JSON-line events.

The startd writes the job ad and the slot ad into the sandbox (`.job.ad`,
`.machine.ad`) and has the starter zygote fork a starter (`python -m
fetchwork.starter`'s main) with pipes on stdin and stdout. Control words go
down stdin one per line; events come back one JSON object per line on
stdout. The starter's stderr is the startd's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.protocol import CONTROL_WORDS, JOB_AD_FILE, MACHINE_AD_FILE, STANDBY_FLAG
from fetchwork.errors import StarterError
from fetchwork.hooks.pipes import read_available

from .sandboxes import Sandboxes
from .zygoteclient import ForkedStarter, ZygoteClient

log = logging.getLogger(__name__)


class StarterProcess:
    """A spawned starter: its pipes, its events so far, and how to stop it."""

    def __init__(self, proc: ForkedStarter, sandbox: str, slot_id: int):
        self.proc = proc
        self.sandbox = sandbox
        self.slot_id = slot_id
        self.pid = proc.pid
        self.exit_how: str | None = None
        self.final_ad: dict[str, Any] | None = None
        self.stdout_closed = False
        self._partial = b""
        # The zygote's pidfd of the starter (no race with pid reuse).
        self.pidfd = proc.pidfd
        os.set_blocking(proc.stdout.fileno(), False)

    @classmethod
    def spawn(cls, slot_id: int, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
              sandboxes: Sandboxes, keyword: str | None,
              standby: StandbyStarters) -> StarterProcess:
        """Make the sandbox with both ads in it and start the starter (a standby
        one when one is ready, else one the zygote forks now)."""
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
            proc = standby.take(args) or standby.start(args)
        except OSError as exc:
            shutil.rmtree(sandbox, ignore_errors=True)
            raise StarterError(f"cannot start the starter: {exc.strerror or exc}") from exc
        except StarterError:
            shutil.rmtree(sandbox, ignore_errors=True)
            raise
        return cls(proc, sandbox, slot_id)

    # -- events --------------------------------------------------------------

    def fileno(self) -> int:
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
        if stdin.closed:
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
        self.proc.close()  # its pipes and its pidfd
        self.pidfd = None
        # HTCondor's startd also cleans an execute directory its starter left.
        shutil.rmtree(self.sandbox, ignore_errors=True)


class StandbyStarters:
    """Starters the zygote forked ahead of need (`STARTER_STANDBY` of them), and the
    way to start one.

    A fork of the zygote that has just been made (milliseconds of page
    copying, its logging, hook threads and hook modules to set up) is not
    ready to run a job; a standby one is, and waits for its arguments on
    stdin (`python -m fetchwork.starter --standby`), so a fetched job starts
    at once. They are made once the zygote is ready and only while they are
    its own (a starter of a zygote that died is let go: the zygote kills what
    a dead starter leaves). One that died while waiting is replaced.
    """

    def __init__(self, count: int, zygote: ZygoteClient):
        self.count = max(0, count)
        self.zygote = zygote
        self._ready: list[ForkedStarter] = []

    def waiting(self) -> list[ForkedStarter]:
        """The standby starters (oldest first)."""
        return list(self._ready)

    def start(self, args: list[str]) -> ForkedStarter:
        """A new starter given `args` (StarterError when none can be started)."""
        return self.zygote.spawn(args)

    def _usable(self, proc: ForkedStarter) -> bool:
        if proc.poll() is not None:
            return False
        return self.zygote.alive() and proc.zygote_pid == self.zygote.pid

    def refill(self) -> None:
        self.zygote.refill()
        for proc in [proc for proc in self._ready if not self._usable(proc)]:
            _let_go(proc)
            self._ready.remove(proc)
        while len(self._ready) < self.count:
            if not self.zygote.ready():
                return  # a fresh zygote is still importing: not worth waiting for
            try:
                self._ready.append(self.start([STANDBY_FLAG]))
            except StarterError as exc:
                log.warning("cannot start a standby starter: %s", exc)
                return

    def take(self, args: list[str]) -> ForkedStarter | None:
        """A ready starter given `args`, or None when none is ready."""
        while self._ready:
            proc = self._ready.pop(0)
            if not self._usable(proc):
                _let_go(proc)
                continue
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
        self.zygote.close()


def _let_go(proc: ForkedStarter) -> None:
    """Close `proc`'s pipes (a standby starter exits at EOF) and reap it."""
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("standby starter %s survived SIGKILL", proc.pid)
    proc.close()


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
