"""Folders for what the test run keeps between runs, outside the checkout.

A test run writes nothing into the tree: what it keeps, such as the
examples Hypothesis replays, lives in a folder of the system temp dir named
after the checkout, so a second run of the same checkout finds it again and
two checkouts never share one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kept_folder(name: str, root: Path = ROOT) -> Path:
    """The folder `name` kept for the checkout at `root` (not created here)."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"fetchwork-tests-{os.getuid()}-{digest}" / name
