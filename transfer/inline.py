"""Small files inside their manifest: a file of at most INLINE_MAX_BYTES travels in
the manifest's own value (`FileEntry.data`) instead of as a chunk of its own.

Why: a chunk costs a round trip to send and one to fetch (or a look into the
machine's cache), a key, and a line in the chunks' reference counts, which for a
file of a few hundred bytes is far more than its bytes. Inside the manifest it
comes with the one read that brings the manifest and goes with the one call that
attaches it. The limit is one page, 4 KiB: most scripts, argument and
configuration files and small results fit, and a file that does not keeps the
chunks' sharing (a file inside a manifest is stored once per distinct manifest,
not once per pool). At most INLINE_MANIFEST_MAX_BYTES of a manifest are inline,
so a manifest stays a small value however many small files a sandbox has.

Nothing is checked less: the manifest is checked against its digest when it is
read (transfer/stored.py), and each inline file against its size and SHA-256 as
it is written (`fill`); its bytes count against the pool's cap like a chunk's
(transfer_attach.lua).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from fetchwork.errors import TransferError

from .manifest import FileEntry

INLINE_MAX_BYTES = 4096
INLINE_MANIFEST_MAX_BYTES = 64 * 1024


class Budget:
    """The inline bytes one manifest may still take."""

    def __init__(self) -> None:
        self.left = INLINE_MANIFEST_MAX_BYTES

    def read(self, fd: int, size: int, name: str, mode: int) -> FileEntry | None:
        """The file open at `fd` (`size` bytes by fstat, read from its start) as an inline
        entry, or None (nothing read, the offset unchanged) when it is too big for the
        limit or what is left of the budget. A file that grew since its fstat past the
        limit is not inlined either: its offset goes back to its start."""
        if size > min(INLINE_MAX_BYTES, self.left):
            return None
        parts: list[bytes] = []
        got = 0
        while got <= INLINE_MAX_BYTES:
            piece = os.read(fd, INLINE_MAX_BYTES + 1 - got)
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        data = b"".join(parts)
        if len(data) > min(INLINE_MAX_BYTES, self.left):
            os.lseek(fd, 0, os.SEEK_SET)
            return None
        self.left -= len(data)
        return FileEntry(name, mode, len(data), hashlib.sha256(data).hexdigest(), (), data)


def fill(entry: FileEntry, code: int = 13) -> Callable[[int], None]:
    """What writes inline `entry` into a descriptor, checked against its size and digest
    first (TransferError naming the file, with hold code `code`, when it does not
    match)."""
    data = entry.data
    if data is None:
        raise ValueError(f"{entry.name} is not an inline file")
    if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
        raise TransferError(f"{entry.name}: the file's bytes in its manifest do not match "
                            "its size and digest", code)

    def write(fd: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    return write
