"""Quality gates that run with the tests: ruff over the tree, mypy over the
whole product, vulture for dead code. None of them writes a cache into the tree.

mypy checks the product under its real module names (`fetchwork.broker`,
...), in a tree of links that tests/project/typetree.py lays out, so the
types that cross components are checked too. By hand, from the
repository's root:

    .venv/bin/python -m tests.project.typetree

vulture reads its settings (the product's folders, and the whitelist
tests/project/vulture_whitelist.py) from pyproject.toml. By hand, from the
repository's root:

    .venv/bin/vulture
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.project import typetree

ROOT = Path(__file__).resolve().parents[2]


# A module added to the checked tree: its two errors are found only when
# mypy resolves the imports between components (were they `Any`, it would
# find nothing). The second goes through two components: the startd's
# settings return a type of the hooks.
TYPE_PROBE = "fetchwork/typeprobe.py"
TYPE_PROBE_TEXT = '''"""Wrong on purpose: what the quality test expects mypy to find."""

from fetchwork.config.convert import to_int
from fetchwork.config.loader import Config
from fetchwork.startd.settings import slot_hooks


def from_config() -> str:
    return to_int("1")


def through_the_startd(config: Config) -> int:
    return slot_hooks(config, 1).fetch
'''
# What each of the probe's errors names: the types mypy saw returned.
TYPE_PROBE_ERRORS = [('"int"', '"str"'), ("HookSpec", '"int"')]
ERROR_LINE = re.compile(r"^(?P<path>[^:\n]+):\d+: error: (?P<message>.*?)"
                        r"(?:  \[(?P<code>[a-z-]+)\])?$", re.MULTILINE)


def test_ruff_passes():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def mypy_run() -> subprocess.CompletedProcess[str]:
    return typetree.check(extra={TYPE_PROBE: TYPE_PROBE_TEXT})


def errors_of(output: str) -> list[re.Match[str]]:
    return list(ERROR_LINE.finditer(output))


@pytest.mark.timeout(300)
def test_mypy_ran(mypy_run):
    # 0: no error; 1: errors found (the probe's at least); 2: mypy itself failed.
    assert mypy_run.returncode == 1 and errors_of(mypy_run.stdout), (
        mypy_run.stdout + mypy_run.stderr)


@pytest.mark.timeout(300)
def test_mypy_checks_types_across_components(mypy_run):
    found = [error for error in errors_of(mypy_run.stdout) if error["path"] == TYPE_PROBE]
    assert len(found) == len(TYPE_PROBE_ERRORS), mypy_run.stdout + mypy_run.stderr
    for error, words in zip(found, TYPE_PROBE_ERRORS, strict=True):
        assert error["code"] == "return-value", error[0]
        assert all(word in error["message"] for word in words), error[0]


@pytest.mark.timeout(300)
def test_mypy_finds_no_error(mypy_run):
    errors = [error[0] for error in errors_of(mypy_run.stdout) if error["path"] != TYPE_PROBE]
    assert not errors, "mypy (see tests/project/typetree.py to run it by hand):\n" + "\n".join(
        errors)


# -- dead code ---------------------------------------------------------------------

WHITELIST = "tests/project/vulture_whitelist.py"
# A module added to what vulture reads: one function of it is called, one is not.
DEAD_PROBE_TEXT = '''def called_by_the_other() -> int:
    return 1


def called_by_nothing() -> int:
    return called_by_the_other()
'''
VULTURE_LINE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): unused \w+ '(?P<name>\w+)'",
                          re.MULTILINE)


def vulture_paths() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return project["tool"]["vulture"]["paths"]


def vulture(*paths: str) -> subprocess.CompletedProcess[str]:
    """vulture with pyproject.toml's settings; `paths` replace its folders when given."""
    return subprocess.run([sys.executable, "-m", "vulture", *paths], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)


def test_vulture_reads_every_component_and_the_whitelist():
    folders = set(typetree.package_dirs().values())
    assert folders | {WHITELIST} == set(vulture_paths())


def test_vulture_finds_no_dead_code():
    done = vulture()
    assert done.returncode == 0 and not done.stdout, (
        "dead code (remove it; or, when it is used where vulture cannot see, name it in "
        f"{WHITELIST} with where):\n" + done.stdout + done.stderr)


def test_vulture_reports_an_unused_function(tmp_path):
    probe = tmp_path / "deadprobe.py"
    probe.write_text(DEAD_PROBE_TEXT, encoding="utf-8")
    done = vulture(*vulture_paths(), str(probe))
    found = [(Path(hit["path"]).name, hit["line"], hit["name"])
             for hit in VULTURE_LINE.finditer(done.stdout)]
    assert done.returncode == 3 and found == [("deadprobe.py", "5", "called_by_nothing")], (
        done.stdout + done.stderr)


def test_each_vulture_whitelist_entry_is_needed():
    tree = ast.parse((ROOT / WHITELIST).read_text(encoding="utf-8"))
    listed = [node.attr for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "_"]
    reported = {hit["name"] for hit in VULTURE_LINE.finditer(
        vulture(*(path for path in vulture_paths() if path != WHITELIST)).stdout)}
    assert listed and not [name for name in listed if name not in reported], (
        f"used now, or gone: remove from {WHITELIST}: "
        + ", ".join(name for name in listed if name not in reported))
