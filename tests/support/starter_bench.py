"""Running real starters for the starter tests: `Bench` (hooks, records, starters).

A `StarterRun` spawns `python -m fetchwork.starter` with knobs in its
environment and reads its JSON-line events; the `bench` fixture
(tests/conftest.py) gives each test a fresh `Bench`, reachable by `nobody`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from fetchwork.config.ads import format_ad
from tests.support.waiting import wait_until

JOB_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
RECORD_HOOK = """#!/bin/sh
# Record arguments, stdin, the job ad file and the environment, then answer.
n=$(date +%s%N)
printf '%s\\n' "$*" > "{records}/{name}.$n.args"
cat > "{records}/{name}.$n.stdin"
cat "$_CONDOR_JOB_AD" > "{records}/{name}.$n.jobad" 2>/dev/null
env > "{records}/{name}.$n.env"
{tail}
"""


class StarterRun:
    """One starter process and what it said."""

    def __init__(self, base: Path, name: str, job: dict[str, Any], knobs: dict[str, str],
                 slot_ad: dict[str, Any] | None = None, slot: int = 1):
        self.sandbox = base / "execute" / name
        self.sandbox.mkdir(parents=True)
        self.sandbox.chmod(0o755)
        job = {"HookKeyword": "T", **job}
        # The two ad files as written here, before the starter runs.
        self.job_ad_text = format_ad(job)
        self.machine_ad_text = format_ad(slot_ad or {"Name": f"slot{slot}@test", "SlotID": slot})
        (self.sandbox / ".job.ad").write_text(self.job_ad_text)
        (self.sandbox / ".machine.ad").write_text(self.machine_ad_text)
        self.job_ad_inode = (self.sandbox / ".job.ad").stat().st_ino
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("_FETCHWORK_") and key != "FETCHWORK_CONFIG"}
        config = base / "empty.conf"
        config.touch()
        env.update(FETCHWORK_CONFIG=str(config), FETCHWORK_STATE_DIR=str(base / "state"),
                   PYTHONPATH=str(base / "hooks"))
        env.update({f"_FETCHWORK_{key}": value for key, value in knobs.items()})
        self.log = base / f"{name}.log"
        self.events: list[dict[str, Any]] = []
        args = ["--job-ad", str(self.sandbox / ".job.ad"),
                "--slot-ad", str(self.sandbox / ".machine.ad"),
                "--slot", str(slot), "--sandbox", str(self.sandbox)]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "fetchwork.starter", *args],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, env=env, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def event(self, name: str, timeout_s: float = 30, **match: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for event in self.events:
                if event["event"] == name and all(event.get(k) == v for k, v in match.items()):
                    return event
            return None

        return wait_until(found, timeout_s, fail_if=self._died, what=f"event {name} {match}")

    def _died(self) -> str | None:
        if self.proc.poll() is not None and not self._reader.is_alive():
            return f"starter exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
        return None

    def finish(self, timeout_s: float = 30) -> dict[str, Any]:
        """Wait for the exited event and the starter's exit status 0."""
        exited = self.event("exited", timeout_s)
        assert self.proc.wait(timeout_s) == 0, self.log.read_text()
        return exited

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class Bench:
    """A base directory with hooks, records and starters."""

    def __init__(self, base: Path):
        self.base = base
        self.hooks = base / "hooks"
        self.records = base / "records"
        self.work = base / "work"
        for path, mode in ((self.hooks, 0o755), (self.records, 0o777), (self.work, 0o777)):
            path.mkdir()
            path.chmod(mode)
        self.runs: list[StarterRun] = []

    def hook(self, name: str, tail: str = "") -> str:
        path = self.hooks / f"{name}.sh"
        path.write_text(RECORD_HOOK.format(records=self.records, name=name, tail=tail))
        path.chmod(0o755)
        return str(path)

    def script(self, name: str, text: str, mode: int = 0o755) -> str:
        path = self.work / name
        path.write_text(text)
        path.chmod(mode)
        return str(path)

    def start(self, job: dict[str, Any], **knobs: str) -> StarterRun:
        run = StarterRun(self.base, f"job{len(self.runs)}", job, knobs)
        self.runs.append(run)
        return run

    def recorded(self, name: str, part: str) -> list[str]:
        files = sorted(self.records.glob(f"{name}.*.{part}"))
        return [path.read_text() for path in files]


def pids_in(path: Path) -> list[int]:
    """The process ids a job wrote to `path`, if it did."""
    return [int(word) for word in path.read_text().split()] if path.exists() else []
