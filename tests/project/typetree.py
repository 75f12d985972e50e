"""mypy over the product under its real module names.

pyproject.toml maps `fetchwork.broker` to the folder `broker/`, and so on
(`[tool.setuptools.package-dir]`). mypy follows neither that map nor the
editable install's import hook, so checking the folders as they are would
make every import from another component `Any`, and the types that cross
components would go unchecked. Instead this lays out the `fetchwork`
package in a temporary folder, built of symbolic links (`fetchwork/broker ->
<repository>/broker`, ..., and what `fetchwork/` itself holds one by one),
and runs `mypy -p fetchwork` there with the repository's `[tool.mypy]`
settings. Paths in what mypy prints are turned back into the repository's.

By hand, from the repository's root (extra arguments go to mypy):

    .venv/bin/python -m tests.project.typetree
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "fetchwork"


def package_dirs() -> dict[str, str]:
    """Package name -> folder of the repository, as pyproject.toml maps them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return project["tool"]["setuptools"]["package-dir"]


def build_tree(into: Path, extra: Mapping[str, str] | None = None) -> Path:
    """Lay out the package `fetchwork` in `into` (links to the repository) and
    write each of `extra` (path under `into` -> text) beside it; `into`."""
    for package, folder in sorted(package_dirs().items()):
        place = into.joinpath(*package.split("."))
        if package == PACKAGE:
            # A folder of its own, so the components can be linked inside it.
            place.mkdir(parents=True)
            for source in sorted((ROOT / folder).iterdir()):
                if source.name != "__pycache__":
                    (place / source.name).symlink_to(source)
        else:
            place.symlink_to(ROOT / folder, target_is_directory=True)
    for name, text in (extra or {}).items():
        (into / name).write_text(text, encoding="utf-8")
    return into


def repository_paths(text: str) -> str:
    """mypy's paths (`fetchwork/broker/x.py`) as the repository's (`broker/x.py`)."""
    folders = {package.replace(".", "/") + "/": folder.rstrip("/") + "/"
               for package, folder in package_dirs().items() if package != PACKAGE}
    pattern = re.compile("^(" + "|".join(map(re.escape, sorted(folders, key=len,
                                                                 reverse=True))) + ")",
                         re.MULTILINE)
    return pattern.sub(lambda found: folders[found.group(1)], text)


def run_mypy(tree: Path, args: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`mypy -p fetchwork` in `tree` with the repository's settings; output in
    the repository's paths."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tree / ".mypy_cache"), *args, "-p", PACKAGE],
        cwd=tree, capture_output=True, text=True, timeout=280, check=False)
    done.stdout = repository_paths(done.stdout)
    done.stderr = repository_paths(done.stderr)
    return done


def check(args: Sequence[str] = (), extra: Mapping[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    """Build the tree in a temporary folder, run mypy there, remove the tree."""
    with tempfile.TemporaryDirectory(prefix="fetchwork-mypy-") as folder:
        return run_mypy(build_tree(Path(folder), extra), args)


def main(argv: Sequence[str]) -> int:
    done = check(argv)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
