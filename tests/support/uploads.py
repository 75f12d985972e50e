"""A file of random bytes written and uploaded to the pool's chunks, as the transfer
tests need one."""

from __future__ import annotations

import os
import random
from pathlib import Path

from fetchwork.broker.store import Store
from fetchwork.transfer.chunks import ChunkStore
from fetchwork.transfer.manifest import FileEntry

# How long an uploaded file's chunks are kept without a job that refers to them.
HOUR_MS = 3_600_000


def uploaded(store: Store, path: Path, size: int, seed: int, mode: int = 0o644) -> FileEntry:
    """`size` random bytes (from `seed`) written at `path`, then uploaded under its name."""
    path.write_bytes(random.Random(seed).randbytes(size))
    fd = os.open(path, os.O_RDONLY)
    try:
        return ChunkStore(store, HOUR_MS).upload(fd, path.name, mode)
    finally:
        os.close(fd)
