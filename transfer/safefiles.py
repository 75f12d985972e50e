"""Files under one folder, never outside it: every name is walked component by
component from an open folder with O_NOFOLLOW, so a symbolic link on the way (one
the job made in its sandbox, or one planted in the submitter's `Iwd`) is refused,
never followed. Files are written under a temporary name and renamed into place,
so a reader never sees half a file and a symlink at the final name is replaced,
not written through.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fetchwork.errors import TransferError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refusal(name: str, exc: OSError, code: int) -> TransferError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return TransferError(f"{name}: a symbolic link is on its path; links are not "
                             "followed", code)
    return TransferError(f"{name}: {exc.strerror}", code, exc.errno or 0)


@contextmanager
def folder(root: str | int, name: str, create: bool, code: int) -> Iterator[int]:
    """An open descriptor of folder `name` (relative, checked) under `root` (a path or
    a descriptor), made on the way when `create`; refuses links."""
    opened: list[int] = []
    try:
        current = root if isinstance(root, int) else os.open(root, _DIR_FLAGS)
        if not isinstance(root, int):
            opened.append(current)
        for part in [p for p in name.split("/") if p and p != "."]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=current)
                except FileExistsError:
                    pass
            try:
                current = os.open(part, _DIR_FLAGS, dir_fd=current)
            except OSError as exc:
                raise _refusal(name, exc, code) from exc
            opened.append(current)
        yield current
    finally:
        for fd in reversed(opened):
            os.close(fd)


def write_file(root: str | int, name: str, mode: int, fill: Callable[[int], None],
               code: int) -> None:
    """Write file `name` under `root` through `fill(fd)`, atomically (a temporary name
    renamed into place), with permission bits `mode`."""
    parent, _, base = name.rpartition("/")
    with folder(root, parent, True, code) as dir_fd:
        temp = f".{base}.{uuid.uuid4().hex[:12]}.part"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, stat.S_IMODE(mode) | 0o600, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(name, exc, code) from exc
        try:
            try:
                fill(fd)
                os.fchmod(fd, stat.S_IMODE(mode) | 0o600)
            finally:
                os.close(fd)
        except BaseException:
            _drop(temp, dir_fd)
            raise
        rename_into_place(dir_fd, temp, base, name, code)


def rename_into_place(dir_fd: int, temp: str, base: str, name: str, code: int) -> None:
    """Rename the written file `temp` to `base` in folder `dir_fd` (`name` its name in
    the sandbox, for errors): a file or link there is replaced, a folder refused;
    `temp` is removed when the rename fails."""
    try:
        existing = _lstat(base, dir_fd)
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise TransferError(f"{name}: a folder of that name is in the way", code)
        os.rename(temp, base, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _drop(temp, dir_fd)
        raise


def _drop(temp: str, dir_fd: int) -> None:
    """Remove the temporary file `temp` of a write that failed, if it is still there."""
    try:
        os.unlink(temp, dir_fd=dir_fd)
    except OSError:
        pass


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


@contextmanager
def open_file(root: str | int, name: str, code: int) -> Iterator[tuple[int, os.stat_result]]:
    """File `name` under `root` open for reading, with its status; a symbolic link
    (at the name or on its path) or anything but a regular file is refused."""
    parent, _, base = name.rpartition("/")
    with folder(root, parent, False, code) as dir_fd:
        try:
            fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(name, exc, code) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise TransferError(f"{name}: not a regular file", code)
            os.set_blocking(fd, True)
            yield fd, info
        finally:
            os.close(fd)


def make_folder(root: str | int, name: str, code: int) -> None:
    with folder(root, name, True, code):
        pass
