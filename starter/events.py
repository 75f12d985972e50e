"""The starter's side of its protocol with the startd: events out, control lines in."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import IO, Any

import classad2

from fetchwork.config.ads import to_dict

log = logging.getLogger(__name__)


class Events:
    """One JSON object per line on the starter's stdout.

    An event is written and flushed at once, unless it is `held`: then it goes
    out with the next one, in the same write. Each write wakes the startd's
    loop, and `prepared`, `started` and the Running state come within a
    millisecond of each other, so one write carries them (the lines and their
    order are the same)."""

    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._lock = threading.Lock()
        self._broken = False
        self._held: list[str] = []

    def emit(self, event: str, held: bool = False, **fields: Any) -> None:
        for name, value in fields.items():
            if isinstance(value, classad2.ClassAd):
                fields[name] = to_dict(value)
        line = json.dumps({"event": event, **fields}, default=str)
        with self._lock:
            if self._broken:
                return
            self._held.append(line + "\n")
            if held:
                return
            text, self._held = "".join(self._held), []
            try:
                self._stream.write(text)
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                # The startd went away; the job still runs its course.
                self._broken = True
                log.warning("cannot write events to the startd any more")


class LineReader:
    """Control words from a file descriptor, one per line; `eof` once it closes."""

    def __init__(self, fd: int):
        self.fd = fd
        self.eof = False
        self._partial = b""

    def read(self) -> list[str]:
        """Read what is available now (call when the fd is readable)."""
        try:
            chunk = os.read(self.fd, 4096)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
            chunk = b"\n"
        return self._words(self._partial + chunk)

    def _words(self, data: bytes) -> list[str]:
        *lines, self._partial = data.split(b"\n")
        return [word for line in lines
                if (word := line.decode("utf-8", "replace").strip().lower())]
