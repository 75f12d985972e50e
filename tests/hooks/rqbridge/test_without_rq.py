"""Without rq the bridge's hooks and job process fail with a message saying so.

Each check runs in a subprocess whose import of rq fails (`sys.modules["rq"]`
set to None, which makes every `import rq` raise ImportError).
"""

from __future__ import annotations

import subprocess
import sys

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
