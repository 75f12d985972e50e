"""`fetchwork demo`, the first command of the README's quickstart, as users run it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fetchwork.config.loader import environ_without_config


@pytest.mark.timeout(240)
def test_the_demo_runs_its_tour_and_exits_zero(job_tmp):
    env = environ_without_config()
    env["TMPDIR"] = str(job_tmp)
    done = subprocess.run([sys.executable, "-m", "fetchwork", "demo"], env=env,
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "7 job(s) submitted to cluster 1." in out
    assert "7 jobs done" in out and "6 exited 0" in out
    assert "out.5: urgent" in out
    assert "out.6: released and ran" in out
    # It leaves nothing behind.
    assert os.listdir(job_tmp) == []
