"""One starter process as the startd sees it: spawn, control lines, JSON-line events.

The startd writes the job ad and the slot ad into the sandbox (`.job.ad`,
`.machine.ad`) and has the starter zygote give the job to a starter (`python
-m fetchwork.starter`'s main in a fork of the zygote) with pipes on its stdin
and stdout. Control words go down stdin one per line; events come back one
JSON object per line on stdout. The starter's stderr is the startd's.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from typing import Any

from fetchwork.config import latencytrace
from fetchwork.config.protocol import CONTROL_WORDS, JOB_AD_FILE, MACHINE_AD_FILE
from fetchwork.errors import StarterError
from fetchwork.hooks.pipes import read_available
from fetchwork.starter import jobspec

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
        self.stdout_closed = False
        self._partial = b""
        # The zygote's pidfd of the starter (no race with pid reuse).
        self.pidfd = proc.pidfd
        # A starter that may run another job says `done` on this socket instead of
        # exiting (None: this job is its last).
        self.done_fd = proc.sock.fileno() if proc.sock is not None else None
        os.set_blocking(proc.stdout.fileno(), False)

    @classmethod
    def spawn(cls, slot_id: int, job_ad_text: str, slot_ad_text: str,
              sandboxes: Sandboxes, keyword: str | None,
              zygote: ZygoteClient) -> StarterProcess:
        """Make the sandbox with both ads in it (the slot ad as the startd formatted
        it for its hooks) and have the zygote start the starter (one it forked
        ahead, when it has one)."""
        try:
            sandbox = sandboxes.make(slot_id, job_ad_text, slot_ad_text)
        except OSError as exc:
            where = exc.filename or sandboxes.execute_dir
            raise StarterError(f"cannot set up the sandbox {where}: {exc.strerror or exc} "
                               f"(check EXECUTE)") from exc
        latencytrace.mark("startd.sandbox_made")
        args = ["--job-ad", os.path.join(sandbox, JOB_AD_FILE),
                "--slot-ad", os.path.join(sandbox, MACHINE_AD_FILE),
                "--slot", str(slot_id), "--sandbox", sandbox]
        if keyword:
            args += ["--keyword", keyword]
        try:
            proc = zygote.spawn(args, slot_id)
        except OSError as exc:
            jobspec.remove_sandbox(sandbox)
            raise StarterError(f"cannot start the starter: {exc.strerror or exc}") from exc
        except StarterError:
            jobspec.remove_sandbox(sandbox)
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
                self.stdout_closed = self.proc.events_ended = True
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

    @property
    def between_jobs(self) -> bool:
        """The starter finished its job and waits for another (it did not exit)."""
        return self.proc.between_jobs

    def close(self, remove_sandbox: bool = True) -> None:
        """Release pipes and the pidfd; remove the sandbox if the starter left it
        behind (not `remove_sandbox`: a starter kept for the next job removes it
        after its `done`; `Sandboxes.left_by`)."""
        self.proc.close()  # its pipes and its pidfd
        self.pidfd = None
        if remove_sandbox:
            # HTCondor's startd also cleans an execute directory its starter left.
            jobspec.remove_sandbox(self.sandbox)


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
