"""What the rq bridge refuses, with a message that says why.

Without rq, the hooks and the job process fail saying what to install (each
check runs in a subprocess whose import of rq fails: `sys.modules["rq"]` set
to None makes every `import rq` raise ImportError). As root, the hooks refuse
to read rq's jobs at all.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fetchwork.hooks.rqbridge import hooks
from fetchwork.hooks.rqbridge.hooks import RqHookError

NO_RQ = "import sys; sys.modules['rq'] = None\n"

HOOK = NO_RQ + """
from fetchwork.hooks.runner import HookSpec, run_hook
spec = HookSpec(hook="FETCH_WORK", keyword="RQ",
                value="python:fetchwork.hooks.rqbridge.hooks:fetch_work")
result = run_hook(spec, 'Name = "slot1@here"\\n')
print(result.ok, result.error)
"""

HORSE = NO_RQ + """
import runpy
sys.argv = ["horse", "worker", "job", "execution", "queue"]
runpy.run_module("fetchwork.hooks.rqbridge.horse", run_name="__main__")
"""

MESSAGE = "the rq bridge needs the rq package"
HINT = "pip install 'fetchwork[rq]'"


def _run(source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_hook_fails_saying_rq_is_missing() -> None:
    done = _run(HOOK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("False cannot load python:fetchwork.hooks.rqbridge.hooks")
    assert "RqMissingError" in done.stdout
    assert MESSAGE in done.stdout and HINT in done.stdout


def test_the_job_process_fails_saying_rq_is_missing() -> None:
    done = _run(HORSE)
    assert done.returncode == 1
    assert MESSAGE in done.stderr and HINT in done.stderr
    assert "Traceback" not in done.stderr


def test_the_hooks_refuse_to_run_as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs a root test run")
    with pytest.raises(RqHookError, match="does not run as root: reading rq's jobs unpickles"):
        hooks.fetch_work([], 'Name = "slot1@here"\n')
    with pytest.raises(RqHookError, match="run the startd as the user rq's workers"):
        hooks.job_exit(["exit"], 'RqJobId = "j"\nRqQueue = "q"\nRqWorker = "w"\n'
                                 'RqExecutionId = "e"\n')
