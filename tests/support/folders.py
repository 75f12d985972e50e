"""Folders that jobs can reach.

Jobs never run as root: under a root test run they run as nobody (or the
slot's user), who cannot enter pytest's private temporary tree. These
folders are made in the system temp dir instead, open to all, and removed
afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def open_folder(prefix: str, mode: int = 0o755) -> Iterator[Path]:
    """A fresh folder outside pytest's tree with permissions `mode`, removed on exit."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(mode)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
