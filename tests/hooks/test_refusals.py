"""Hooks the runner refuses to run (unsafe, missing, bad values), and hooks run as another user."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchwork.hooks.runner import HookSpec, program_refusal, run_hook

# -- refusing unsafe or missing programs -------------------------------------

@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "safe" / "hook.sh"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\necho ran\n")
    path.chmod(0o755)
    return path


def _refused(path: Path | str, words: str) -> None:
    spec = HookSpec(hook="TEST", keyword="T", value=str(path), timeout_s=10)
    result = run_hook(spec, "")
    assert not result.ok
    assert result.exit_code is None and result.stdout == ""
    assert result.error is not None and words in result.error, result.error


def test_safe_program_runs(script):
    assert program_refusal(str(script)) is None
    spec = HookSpec(hook="TEST", keyword="T", value=str(script), timeout_s=10)
    assert run_hook(spec, "").stdout == "ran\n"


def test_world_writable_file_refused(script):
    script.chmod(0o777)
    _refused(script, "world-writable")


def test_file_in_world_writable_directory_refused(script):
    script.parent.chmod(0o777 | stat.S_ISVTX)  # refused even with the sticky bit
    _refused(script, "world-writable directory")


def test_missing_program_refused(tmp_path):
    _refused(tmp_path / "nothing-here", "No such file")


def test_non_executable_program_refused(script):
    script.chmod(0o644)
    _refused(script, "not executable")


def test_relative_program_refused():
    _refused("hooks/fetch.sh", "not an absolute path")


def test_directory_refused(tmp_path):
    _refused(tmp_path, "not a regular file")


def test_bad_in_process_values_are_errors():
    _refused("python:no_such_module_here:hook", "cannot load")
    _refused("python:os:no_such_function", "cannot load")
    _refused("python:os", "cannot load")


def test_in_process_bad_return_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "badret.py").write_text("def hook(args, stdin_text):\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = HookSpec(hook="TEST", keyword="T", value="python:badret:hook", timeout_s=10)
    result = run_hook(spec, "")
    assert not result.ok and "not text" in (result.error or "")


# -- running as another user -------------------------------------------------

@pytest.fixture
def open_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fw-hook-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_program_runs_as_the_given_user(open_dir):
    nobody = pwd.getpwnam("nobody")
    path = open_dir / "whoami.sh"
    path.write_text("#!/bin/sh\nid -u\n")
    path.chmod(0o755)
    spec = HookSpec(hook="TEST", keyword="T", value=str(path), timeout_s=10)
    result = run_hook(spec, "", cwd=str(open_dir), user=(nobody.pw_uid, nobody.pw_gid))
    assert result.ok, result
    assert result.stdout.strip() == str(nobody.pw_uid)
