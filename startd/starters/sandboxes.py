"""Job sandboxes under EXECUTE: `dir_<startd pid>_<slot>_<n>`, one made ahead.

A sandbox is a folder holding the job ad and the slot ad (`.job.ad`,
`.machine.ad`). Making a folder and creating two files in it is a few
journalled writes: about half a millisecond on an ext4 disk, between a
fetched job and its start. So the startd makes the next sandbox, with both
files empty, while it has time (at its start, once a job has started, once
a starter has gone), and a job's start only renames that folder and fills
its two files. When there is none ready, or it is gone, the job's start
makes its own as before.

A starter kept for the slot's next job removes its job's sandbox after it
said `done`, while the slot fetches again (`left_by`); the slot's next
sandbox, or the startd's exit, removes it if that starter died first.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil

import psutil

from fetchwork.config.protocol import JOB_AD_FILE, MACHINE_AD_FILE
from fetchwork.starter.jobspec import remove_sandbox

log = logging.getLogger(__name__)

# The middle word of a sandbox made ahead, not yet any slot's.
AHEAD = "next"


def sandbox_name(startd_pid: int, slot_id: int | str, number: int) -> str:
    return f"dir_{startd_pid}_{slot_id}_{number}"


class Sandboxes:
    """The sandboxes this startd makes, and the one it keeps made ahead."""

    def __init__(self, execute_dir: str):
        self.execute_dir = execute_dir
        self._numbers = itertools.count(1)
        self._ahead: str | None = None
        # Per slot, the last job's sandbox that its kept starter removes.
        self._left: dict[int, str] = {}

    def refill(self) -> None:
        """Make the next sandbox ahead, unless one is ready. A failure is only
        noted: the job's own start then makes its sandbox, or says why not."""
        if self._ahead is not None:
            return
        path = self._path(AHEAD)
        try:
            os.mkdir(path, 0o755)
            for name in (JOB_AD_FILE, MACHINE_AD_FILE):
                os.close(os.open(os.path.join(path, name),
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        except OSError as exc:
            shutil.rmtree(path, ignore_errors=True)
            log.debug("cannot make a sandbox ahead in %s: %s", self.execute_dir,
                      exc.strerror or exc)
            return
        self._ahead = path

    def left_by(self, slot_id: int, path: str) -> None:
        """The sandbox `path` of slot `slot_id`'s last job is its kept starter's to
        remove; looked at again when the slot's next sandbox is made."""
        self._left[slot_id] = path

    def make(self, slot_id: int, job_text: str, machine_text: str) -> str:
        """A new sandbox for a job of slot `slot_id`, holding its two ads; its path.
        OSError when it cannot be made (nothing of it is left then)."""
        left = self._left.pop(slot_id, None)
        if left is not None and os.path.lexists(left):  # its kept starter died first
            remove_sandbox(left)
        path = self._path(slot_id)
        ahead, self._ahead = self._ahead, None
        made = False
        if ahead is not None:
            try:
                os.rename(ahead, path)  # fails when someone removed it meanwhile
                made = True
            except OSError:
                shutil.rmtree(ahead, ignore_errors=True)
        try:
            if not made:
                os.makedirs(path, mode=0o755, exist_ok=False)
            _write(os.path.join(path, JOB_AD_FILE), job_text)
            _write(os.path.join(path, MACHINE_AD_FILE), machine_text)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return path

    def use(self, execute_dir: str) -> None:
        """Make sandboxes under `execute_dir` from now on (EXECUTE reloaded): the
        one made ahead under the previous folder is removed."""
        if execute_dir != self.execute_dir:
            self.close()
            self.execute_dir = execute_dir

    def close(self) -> None:
        """Remove the sandbox made ahead, and those kept starters were to remove (the
        startd exits)."""
        ahead, self._ahead = self._ahead, None
        for path in ([ahead] if ahead is not None else []) + list(self._left.values()):
            remove_sandbox(path)
        self._left.clear()

    def _path(self, middle: int | str) -> str:
        return os.path.join(self.execute_dir,
                            sandbox_name(os.getpid(), middle, next(self._numbers)))


def _write(path: str, text: str) -> None:
    """`text` as the whole of `path`, an empty file made ahead or none yet, in one
    write (no buffered file object: this is on every job's path from the fetch to
    its start). Not opened with O_TRUNC: ext4 takes a truncation to zero as a file
    being replaced and writes its data out when it is closed (`auto_da_alloc`),
    which made the file's removal after the job five to ten times as long."""
    data = text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if os.fstat(fd).st_size > len(data):  # not empty before: cut what is left
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def remove_stale_sandboxes(execute_dir: str) -> list[str]:
    """Remove sandboxes left by startds that are gone (a crash, SIGKILL); return their paths.

    HTCondor's startd empties its execute directory when it starts; here
    several startds may share one, so only folders whose startd process no
    longer exists are removed.
    """
    removed: list[str] = []
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
