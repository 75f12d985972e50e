"""Quality gates that run with the tests: ruff over the tree, mypy over the
pure modules (listed in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("tool", [["ruff", "check", "."], ["mypy"]], ids=["ruff", "mypy"])
def test_the_tree_passes(tool):
    done = subprocess.run([sys.executable, "-m", *tool], cwd=ROOT, capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
