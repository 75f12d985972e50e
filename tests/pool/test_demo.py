"""`fetchwork demo`, the first command of the README's quickstart, as users run it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fetchwork.config.loader import environ_without_config
from fetchwork.demo import unsettled


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
    # The last picture of the pool shows the slots after the last job, not a slot
    # still holding the claim of a job that has finished.
    last_view = out.split("the history")[0].rsplit("NAME", 1)[1]
    slot_rows = [line.split() for line in last_view.splitlines() if "@localhost" in line]
    assert [row[1:3] for row in slot_rows] == [["Unclaimed", "Idle"]] * 2, last_view
    assert "every slot is free" in out
    # It leaves nothing behind.
    assert os.listdir(job_tmp) == []


def test_slots_are_settled_once_none_is_claimed_or_names_a_job():
    free = {"Name": "slot1@h", "State": "Unclaimed", "Activity": "Idle"}
    kept = {"Name": "slot2@h", "State": "Claimed", "Activity": "Idle", "JobId": "1.3"}
    assert unsettled([free, {**free, "Name": "slot2@h"}], 2) == []
    assert unsettled([free, kept], 2) == ["slot2@h Claimed Idle with job 1.3"]
    assert unsettled([free], 2) == ["1 slot(s) not reported"]
    assert unsettled([free, {**free, "Name": "slot2@h", "State": "Owner"}], 2) == []
