"""A big input's sandbox file written while its chunks arrive, out of sight until the
whole file is checked.

The machine's cache is filled by the execute side's own account (transfer/
checkedfill.py), each chunk checked against its digest as it arrives and the
file's digest computed over the same bytes. Copying the file into the sandbox
only after that pass adds a second pass over every byte after the first one is
over; here each chunk, once checked, is also written at its offset into the
job's file while the next chunks arrive, so the two writes overlap.

What stays as it was:

- nothing of a chunk is written before its digest is checked, and the job's file
  keeps a hidden temporary name (`.NAME.XXXXXXXXXXXX.part`, as every file the
  transfer writes) until its whole size and digest are checked; only then does
  `place` rename it to its name. A file that fails is removed, never renamed, and
  the job is held before it runs (the job cannot see its sandbox before then);
- the file is made, written and renamed with the job's user's rights (`rights`:
  the effective ids of the one thread doing it, transfer/privstate.py, while the
  fill's other threads stay the execute side's account), walked from the sandbox
  with no symbolic link followed (transfer/safefiles.py);
- the written bytes come from the buffer whose digest was just checked, not from
  the cache's file, so a chunk changed on disk after its check cannot slip in;
- it is a file of its own, never a link to the cache.

A file this cannot write early (its folder refused, a write that fails, a chunk
the pool lacks) is dropped here and written later the plain way, which reports
its own error naming the file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from fetchwork.errors import TransferError

from . import safefiles
from .manifest import FileEntry

log = logging.getLogger(__name__)

Rights = Callable[[], contextlib.AbstractContextManager[None]]


@dataclass
class _Early:
    """One file being written under its temporary name."""

    parent: str
    temp: str
    fd: int
    mode: int
    checked: bool = False
    failed: bool = False


class SandboxFill:
    """The early writes of the files of several chunks into one job's sandbox."""

    def __init__(self, sandbox: str, rights: Rights, code: int):
        self.sandbox = sandbox
        self.rights = rights
        self.code = code
        self._files: dict[str, _Early] = {}
        self._lock = threading.Lock()

    def start(self, entry: FileEntry) -> bool:
        """Open `entry`'s temporary file in the sandbox, as the job's user; False
        (nothing made) when that cannot be done here: the file is written later."""
        parent, _, base = entry.name.rpartition("/")
        temp = f".{base}.{uuid.uuid4().hex[:12]}.part"
        try:
            with self.rights(), safefiles.folder(self.sandbox, parent, True,
                                                 self.code) as dir_fd:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except (OSError, TransferError) as exc:
            log.debug("%s: not written into the sandbox as it arrives: %s", entry.name, exc)
            return False
        with self._lock:
            self._files[entry.name] = _Early(parent, temp, fd, stat.S_IMODE(entry.mode))
        return True

    def write(self, name: str, offset: int, data: bytes | memoryview) -> None:
        """Write checked bytes of file `name` at `offset`, as the job's user (on the
        fill's sandbox thread). A failure drops the file: it is written later."""
        early = self._files.get(name)
        if early is None or early.failed:
            return
        try:
            with self.rights():
                view = memoryview(data)
                while view:
                    written = os.pwrite(early.fd, view, offset)
                    view, offset = view[written:], offset + written
        except OSError as exc:
            log.debug("%s: the early write failed (%s); written later", name, exc)
            early.failed = True

    def checked(self, name: str) -> None:
        """Every byte of `name` was written and the file's size and digest checked."""
        early = self._files.get(name)
        if early is not None and not early.failed:
            early.checked = True

    def drop(self, name: str) -> None:
        """Give up `name` here (incomplete): its temporary file goes."""
        with self._lock:
            early = self._files.pop(name, None)
        if early is not None:
            self._remove(early)

    def place(self, name: str) -> bool:
        """Rename checked file `name` to its name in the sandbox, with its mode; False
        when it was not written whole here (the caller writes it). Called with the
        job's user's rights, as the file's plain writing is."""
        with self._lock:
            early = self._files.get(name)
            if early is None or not early.checked or early.failed:
                return False
            del self._files[name]
        base = name.rpartition("/")[2]
        try:
            os.fchmod(early.fd, early.mode | 0o600)
        finally:
            os.close(early.fd)
        with safefiles.folder(self.sandbox, early.parent, True, self.code) as dir_fd:
            safefiles.rename_into_place(dir_fd, early.temp, base, name, self.code)
        return True

    def close(self) -> None:
        """Remove every temporary file not placed (a failed or stopped transfer)."""
        with self._lock:
            left, self._files = list(self._files.values()), {}
        for early in left:
            self._remove(early)

    def _remove(self, early: _Early) -> None:
        os.close(early.fd)
        try:
            with self.rights(), safefiles.folder(self.sandbox, early.parent, False,
                                                 self.code) as dir_fd:
                os.unlink(early.temp, dir_fd=dir_fd)
        except (OSError, TransferError) as exc:
            log.warning("cannot remove the partial input %s: %s", early.temp, exc)
