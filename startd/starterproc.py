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
import psutil

from fetchwork.config import ads
from fetchwork.config.protocol import CONTROL_WORDS, JOB_AD_FILE, MACHINE_AD_FILE, STANDBY_FLAG
from fetchwork.errors import StarterError
from fetchwork.hooks.pipes import open_pidfd, read_available
from fetchwork.startd.zygoteclient import ForkedStarter, ZygoteClient

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
              sandbox: str, keyword: str | None,
              env: Mapping[str, str] | None = None,
              standby: StandbyStarters | ZygoteClient | None = None) -> StarterProcess:
        """Make the sandbox, write both ads into it and start the starter
        (forked by the zygote, or a standby one, when `standby` is given)."""
        try:
            os.makedirs(sandbox, mode=0o755, exist_ok=False)
            _write(os.path.join(sandbox, JOB_AD_FILE), ads.format_ad(job_ad))
            _write(os.path.join(sandbox, MACHINE_AD_FILE), ads.format_ad(slot_ad))
        except OSError as exc:
            shutil.rmtree(sandbox, ignore_errors=True)
            raise StarterError(f"cannot set up the sandbox {sandbox}: {exc.strerror or exc} "
                               f"(check EXECUTE)") from exc
        args = ["--job-ad", os.path.join(sandbox, JOB_AD_FILE),
                "--slot-ad", os.path.join(sandbox, MACHINE_AD_FILE),
                "--slot", str(slot_id), "--sandbox", sandbox]
        if keyword:
            args += ["--keyword", keyword]
        try:
            proc: subprocess.Popen[bytes] | ForkedStarter | None = (
                standby.take(args) if standby is not None and env is None else None)
        except StarterError:
            shutil.rmtree(sandbox, ignore_errors=True)
            raise
        if proc is None:
            try:
                proc = _popen_starter(args, env)
            except OSError as exc:
                shutil.rmtree(sandbox, ignore_errors=True)
                raise StarterError(f"cannot start the starter: {exc.strerror or exc}") from exc
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


class StandbyStarters:
    """Starters started ahead of need (`STARTER_STANDBY` of them).

    A fresh starter spends a few hundred ms starting Python and importing
    before it can run a job; a standby one has done that and waits for its
    arguments on stdin (`python -m fetchwork.starter --standby`), so a
    fetched job starts at once. One that died while waiting is replaced.
    """

    def __init__(self, count: int):
        self.count = max(0, count)
        self._ready: list[subprocess.Popen[bytes]] = []

    def refill(self) -> None:
        for proc in [proc for proc in self._ready if proc.poll() is not None]:
            _close_pipes(proc)
            self._ready.remove(proc)
        while len(self._ready) < self.count:
            try:
                self._ready.append(_popen_starter([STANDBY_FLAG]))
            except OSError as exc:
                log.warning("cannot start a standby starter: %s", exc.strerror or exc)
                return

    def take(self, args: list[str]) -> subprocess.Popen[bytes] | None:
        """A ready starter given `args`, or None when none is ready."""
        while self._ready:
            proc = self._ready.pop(0)
            if proc.poll() is not None:
                _close_pipes(proc)
                continue
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(args).encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                proc.kill()
                proc.wait()
                _close_pipes(proc)
                continue
            return proc
        return None

    def close(self) -> None:
        """Let every waiting starter go: EOF before arguments makes it exit 0."""
        for proc in self._ready:
            _close_pipes(proc)
        for proc in self._ready:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._ready = []


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    """Close the parent's ends of `proc`'s pipes."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def sandbox_name(startd_pid: int, slot_id: int, number: int) -> str:
    return f"dir_{startd_pid}_{slot_id}_{number}"


def remove_stale_sandboxes(execute_dir: str) -> list[str]:
    """Remove sandboxes left by startds that are gone (a crash, SIGKILL); return their paths.

    HTCondor's startd empties its execute directory when it starts; here
    several startds may share one, so only folders whose startd process no
    longer exists are removed.
    """
    removed = []
    try:
        names = os.listdir(execute_dir)
    except OSError:
        return removed
    for name in names:
        parts = name.split("_")
        if len(parts) != 4 or parts[0] != "dir" or not parts[1].isdigit():
            continue
        if int(parts[1]) == os.getpid() or psutil.pid_exists(int(parts[1])):
            continue
        path = os.path.join(execute_dir, name)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


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
