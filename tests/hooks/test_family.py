"""A program hook's whole family dies with it, as HTCondor kills a hook's
family: children left in its group, children that moved to a group of their
own, and children that left its session with `setsid` (even twice removed).
Real hook programs, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fetchwork.hooks import family
from fetchwork.hooks.runner import HookSpec, run_hook
from tests.support.processes import alive, kill_now
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def _hook(tmp_path: Path, body: str, timeout_s: float = 60) -> HookSpec:
    path = tmp_path / "hook.sh"
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)
    return HookSpec(hook="TEST", keyword="T", value=str(path), timeout_s=timeout_s)


def _pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()] if path.exists() else []


@pytest.fixture
def left(tmp_path):
    """The file the hooks write their children's pids to; whatever is left is killed."""
    path = tmp_path / "left"
    yield path
    for pid in _pids(path):
        kill_now(pid)


# Each launch leaves a `sleep 1000` (writing nothing to the hook's pipes) and
# records its pid once it has left the hook's group, so the hook may end.
_EXECED = "until tr '\\0' ' ' < /proc/$!/cmdline 2>/dev/null | grep -q '^sleep 1000'; " \
          "do sleep 0.01; done\n"
LAUNCHES = {
    "setsid": 'setsid sleep 1000 >/dev/null 2>&1 &\n' + _EXECED + 'echo $! >> "{left}"\n',
    "own group": 'python3 -c "import os, time; os.setpgid(0, 0); '
                 'open(\'{left}\', \'a\').write(str(os.getpid())); time.sleep(1000)" '
                 '>/dev/null 2>&1 &\n',
    "setsid, then a grandchild": "setsid sh -c 'sleep 1000 & echo $! >> \"{left}\"; wait' "
                                 ">/dev/null 2>&1 &\n",
}


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_children_that_left_the_group_die_with_the_hook(tmp_path, left, launch):
    body = LAUNCHES[launch].format(left=left)
    # The hook waits until its child is on record, so the test knows which to look for.
    body += f'while [ ! -s "{left}" ]; do sleep 0.01; done\necho done\n'
    result = run_hook(_hook(tmp_path, body), "")
    assert result.ok and result.stdout == "done\n", result
    [pid] = _pids(left)
    wait_until(lambda: not alive(pid), 10, what=f"the {launch} child killed")


def test_a_hook_killed_at_its_timeout_takes_its_setsid_child_along(tmp_path, left):
    body = ('setsid sleep 1000 >/dev/null 2>&1 &\n' + _EXECED
            + f'echo $! >> "{left}"\nsleep 1000\n')
    result = run_hook(_hook(tmp_path, body, timeout_s=1), "")
    assert result.timed_out
    [pid] = _pids(left)
    wait_until(lambda: not alive(pid), 10, what="the setsid child killed at the timeout")


def test_the_family_is_the_marked_processes_and_the_session():
    env, marker = family.marked_env({"PATH": os.environ.get("PATH", "")})
    assert env[family.MARKER_VAR] == marker
    assert family.marked_env(None)[1] != marker
    started_at = time.time()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                start_new_session=True)
    member = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env=env, start_new_session=True)
    try:
        wait_until(lambda: family.members(1, marker, started_at), 10,
                   what="the marked process found")
        assert [p.pid for p in family.members(1, marker, started_at)] == [member.pid]
        assert family.kill_family(1, marker, started_at) == 1
        assert member.wait(10) == -9
        assert stranger.poll() is None
    finally:
        for proc in (stranger, member):
            proc.kill()
            proc.wait()
