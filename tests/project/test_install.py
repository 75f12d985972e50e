"""A regular (not editable) install, run from the root of a clone.

There the current folder holds the clone's `fetchwork/` folder, which is
not the installed package (the components live beside it). The pool's
Python children (broker, startd, starters) must not put the current folder
on their path, or they would import that folder instead of the package.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.folders import open_folder
from tests.support.pools import Up, pool_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

# The ordinary user of the second test.
USER, GROUP = "nobody", "nogroup"

ROOT = Path(__file__).resolve().parents[2]


def _sources() -> list[str]:
    """What the build reads: the project file, the readme and every package folder."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = project["tool"]["setuptools"]["package-dir"].values()
    return ["pyproject.toml", "README.md", *sorted(set(folders))]


def _install(base: Path, as_user: Sequence[str] = (),
             interpreter: str = sys.executable) -> tuple[Path, Path]:
    """(clone, script): a copy of the tree's sources in `base`, and the `fetchwork`
    script of a virtual environment into which pip installed that copy (not
    editable), both done by the command prefix `as_user` (empty: this user)."""
    clone = base / "clone"
    clone.mkdir()
    for name in _sources():
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, clone / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, clone / name)
    if as_user:
        subprocess.run(["chown", "-R", f"{USER}:{GROUP}", str(base)], check=True, timeout=60)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base)}
    # A fresh environment that sees the test environment's dependencies but not
    # its editable install (a path in a .pth file is not itself a site folder).
    venv = base / "venv"
    subprocess.run([*as_user, interpreter, "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=60, env=env)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([*as_user, str(python), "-c", where], capture_output=True, text=True,
                          check=True, timeout=60, env=env).stdout.strip()
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "test-dependencies.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    # pip is among those dependencies: the environment's own python runs it.
    done = subprocess.run(
        [*as_user, str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
         "--no-cache-dir", "--disable-pip-version-check", str(clone)],
        capture_output=True, text=True, timeout=180, check=False, env=env)
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    assert (Path(site) / "fetchwork" / "broker").is_dir(), "the install has the broker package"
    assert not (clone / "fetchwork" / "broker").exists(), "the clone's fetchwork/ lacks it"
    return clone, venv / "bin" / "fetchwork"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _install(tmp_path_factory.mktemp("install"))


def _fw(command: Sequence[str], env: dict[str, str], *args: str, cwd: Path) -> str:
    done = subprocess.run([*command, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"fetchwork {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _up_and_a_job(clone: Path, script: Path, folder: Path,
                  as_user: Sequence[str] = ()) -> None:
    """`fetchwork up` from the clone's root, one job submitted from a folder of its own."""
    env = pool_env(folder / "state")
    if as_user:
        env["HOME"] = str(folder)

    def fw(*args: str, cwd: Path) -> str:
        return _fw([*as_user, str(script)], env, *args, cwd=cwd)

    up = Up(env, 1, folder / "up.log", command=[*as_user, str(script)], cwd=clone)
    try:
        wait_until(lambda: "slot1" in fw("status", cwd=clone), timeout_s=60,
                   fail_if=up.died, what="the slot reported by fetchwork status")
        work = folder / "work"
        work.mkdir()
        work.chmod(0o777)
        fw("submit", "--output", "out", "--", "/bin/echo", "from a clone", cwd=work)
        wait_until(lambda: json.loads(fw("q", "--json", cwd=clone)) == [],
                   timeout_s=90, fail_if=up.died, what="the job to finish")
        [ad] = json.loads(fw("history", "--json", cwd=clone))
        assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0, ad
        assert (work / "out").read_text() == "from a clone\n"
        assert up.stop() == 0, up.log_path.read_text()
        assert "No module named" not in up.log_path.read_text()
    finally:
        if up.process.poll() is None:
            up.kill_all()
        subprocess.run([*as_user, str(script), "redis", "stop"], env=env, cwd=clone,
                       capture_output=True, timeout=60, check=False)


def test_up_and_a_job_from_the_root_of_a_clone(installed, job_tmp):
    clone, script = installed
    assert script.exists(), "pip installed the console script"
    _up_and_a_job(clone, script, job_tmp)


def _interpreter_for(as_user: Sequence[str]) -> str:
    """A python3 of this exact version the user can run: this one, or the system's (this
    one may live where only root can reach, as under a root-only pyenv)."""
    # The same version to the micro: it shares this environment's dependencies.
    probe = "import platform; print(platform.python_version())"
    wanted = platform.python_version()
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        done = subprocess.run([*as_user, candidate, "-c", probe], capture_output=True,
                              text=True, timeout=30, check=False)
        reachable = subprocess.run([*as_user, "test", "-x", os.path.realpath(candidate)],
                                   timeout=30, check=False).returncode == 0
        if reachable and done.returncode == 0 and done.stdout.strip() == wanted:
            return candidate
    pytest.skip(f"no python{wanted} that {USER} may run (the tests' own lives out of its reach)")


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming an ordinary user needs root "
                    "(an ordinary user's run is the test above)")
def test_an_ordinary_user_installs_from_a_clone_and_runs_a_job():
    """The same install and run by an ordinary user (nobody), with no right beyond
    its own folders."""
    as_user = ["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--clear-groups", "--"]
    interpreter = _interpreter_for(as_user)
    with open_folder("fw-install-user-") as base:
        clone, script = _install(base, as_user, interpreter)
        owner = subprocess.run([*as_user, "id", "-u"], capture_output=True, text=True,
                               check=True, timeout=30).stdout.strip()
        assert owner != "0" and script.stat().st_uid == int(owner), "installed by the user"
        _up_and_a_job(clone, script, base, as_user)
