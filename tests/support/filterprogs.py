"""Real filter programs for tests: tiny shell scripts that log their calls.

Each script appends one line per call to a log: its name, the action, the
value of the `Tag` attribute in the ad file it was given and, for
activation, the FETCHWORK_* facts; then it does `body` (shell) and exits
with `code` (a number, or a shell expression such as `$CODE`).
"""

from __future__ import annotations

import stat
from pathlib import Path

from fetchwork.broker.filters.runner import FilterSpec

TEMPLATE = """#!/bin/sh
# the action and the ad file are the last two arguments
for last; do :; done
file="$last"
action=""
for a; do [ "$a" = "$file" ] || action="$a"; done
tag=$(sed -n 's/^Tag = //p' "$file")
echo "{name} $action $tag args=$* pass=$FETCHWORK_SCHEDULER_PASS index=$FETCHWORK_JOB_INDEX \
backfill=$FETCHWORK_BACKFILL cpus=$FETCHWORK_RESOURCE_COUNT slot=$FETCHWORK_SLOT_AD" >> {log}
{body}
exit {code}
"""


def write_filter(folder: Path, name: str, code: int | str = 0, body: str = "",
                 log: Path | None = None) -> Path:
    """An executable filter script `folder/name` logging its calls to `log` (or calls.log)."""
    log = log or folder / "calls.log"
    path = folder / name
    path.write_text(TEMPLATE.format(name=name, log=log, body=body, code=code))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def calls(folder: Path, log: Path | None = None) -> list[str]:
    """The logged calls as 'NAME action tag' (the rest of each line dropped)."""
    log = log or folder / "calls.log"
    if not log.exists():
        return []
    return [" ".join(line.split(" args=")[0].split()) for line in log.read_text().splitlines()]


def log_lines(folder: Path) -> list[str]:
    path = folder / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def spec(path: Path | str, kind: str = "submission", timeout_s: float = 10.0,
         args: tuple[str, ...] = (), name: str | None = None) -> FilterSpec:
    return FilterSpec(name=name or Path(path).name.upper(), kind=kind, value=str(path),
                      args=args, timeout_s=timeout_s)
