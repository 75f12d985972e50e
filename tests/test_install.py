"""A regular (not editable) install, run from the root of a clone.

There the current folder holds the clone's `fetchwork/` folder, which is
not the installed package (the components live beside it). The pool's
Python children (broker, startd, starters) must not put the current folder
on their path, or they would import that folder instead of the package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.test_pool import Up, _env
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent


def _sources() -> list[str]:
    """What the build reads: the project file, the readme and every package folder."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = project["tool"]["setuptools"]["package-dir"].values()
    return ["pyproject.toml", "README.md", *sorted(set(folders))]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(clone, script): a copy of the tree's sources, and the `fetchwork` script of a
    virtual environment into which pip installed that copy (not editable)."""
    base = tmp_path_factory.mktemp("install")
    clone = base / "clone"
    clone.mkdir()
    for name in _sources():
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, clone / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, clone / name)
    # A fresh environment that sees the test environment's dependencies but not
    # its editable install (a path in a .pth file is not itself a site folder).
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "test-dependencies.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-compile", "--disable-pip-version-check", str(clone)],
        capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    assert (Path(site) / "fetchwork" / "broker").is_dir(), "the install has the broker package"
    assert not (clone / "fetchwork" / "broker").exists(), "the clone's fetchwork/ lacks it"
    return clone, venv / "bin" / "fetchwork"


def _fw(script: Path, env: dict[str, str], *args: str, cwd: Path) -> str:
    done = subprocess.run([str(script), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"fetchwork {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_up_and_a_job_from_the_root_of_a_clone(installed, job_tmp):
    clone, script = installed
    assert script.exists(), "pip installed the console script"
    env = _env(job_tmp / "state")
    up = Up(env, 1, job_tmp / "up.log", command=[str(script)], cwd=clone)
    try:
        wait_until(lambda: "slot1" in _fw(script, env, "status", cwd=clone), timeout_s=60,
                   fail_if=up.died, what="the slot reported by fetchwork status")
        work = job_tmp / "work"
        work.mkdir()
        work.chmod(0o777)
        _fw(script, env, "submit", "--output", "out", "--", "/bin/echo", "from a clone",
            cwd=work)
        wait_until(lambda: json.loads(_fw(script, env, "q", "--json", cwd=clone)) == [],
                   timeout_s=90, fail_if=up.died, what="the job to finish")
        [ad] = json.loads(_fw(script, env, "history", "--json", cwd=clone))
        assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0, ad
        assert (work / "out").read_text() == "from a clone\n"
        assert up.stop() == 0, up.log_path.read_text()
        assert "No module named" not in up.log_path.read_text()
    finally:
        if up.process.poll() is None:
            up.kill_all()
        subprocess.run([str(script), "redis", "stop"], env=env, cwd=clone,
                           capture_output=True, timeout=60, check=False)
