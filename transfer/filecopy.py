"""Bytes from one open file to another inside the kernel, with a plain fallback.

A cached chunk goes into a job's sandbox with `copy_file_range` (no pass of the
bytes through this process; on a file system that shares extents, a copy that
costs no data at all, still a copy of its own that the job may change). Where
the kernel refuses it (two file systems on an older kernel, a file system
without it, a kernel without the call), the bytes go through a read/write loop
from where the refused call left both offsets. Never a hard link: a job may
change its input files, and a link would change the machine's cache with them.
"""

from __future__ import annotations

import errno
import os

# Errors with which copy_file_range says "not here", not "this failed": across file
# systems, unsupported by one of them or by the kernel, or a file it will not take.
REFUSED = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP,
                     errno.EINVAL, errno.EBADF, errno.EPERM})
# The read/write loop's piece: large enough that a call costs nothing beside its bytes.
PIECE_BYTES = 1 << 20


def copy(source: int, target: int, count: int) -> int:
    """Copy up to `count` bytes from `source`'s offset to `target`'s, both advanced;
    the bytes copied (fewer only at `source`'s end). In the kernel where it takes it,
    else read and written here."""
    left = count
    while left > 0:
        try:
            done = os.copy_file_range(source, target, left)
        except OSError as exc:
            if exc.errno not in REFUSED:
                raise
            break
        if not done:  # the end of `source`, or a file system that copies nothing this way
            break
        left -= done
    while left > 0:
        piece = os.read(source, min(left, PIECE_BYTES))
        if not piece:
            break
        view = memoryview(piece)
        while view:
            view = view[os.write(target, view):]
        left -= len(piece)
    return count - left


def read_into(fd: int, buffer: bytearray) -> int:
    """Fill `buffer` from `fd`; the bytes read, fewer than its size only at `fd`'s end."""
    view = memoryview(buffer)
    got = 0
    while got < len(view):
        count = os.readv(fd, [view[got:]])
        if not count:
            break
        got += count
    return got
