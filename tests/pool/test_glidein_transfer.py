"""The README's glide-in section, run as written: a job with inputs (a file and a
folder's contents) and outputs, submitted with `submit -wait` from a folder
closed to everyone but the submitter, run by `fetchwork glidein` with its own state
folder and home and nothing of the submitter's environment; the job runs as a
user who cannot read the submitter's folder, so everything it has came through
the pool's Redis, and its outputs land beside the submit file."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

import pytest

from fetchwork.config.loader import environ_without_config
from tests.support.folders import open_folder
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(200)

ROOT = os.geteuid() == 0
SUBMITTER = "daemon" if ROOT else pwd.getpwuid(os.geteuid()).pw_name

ANALYSE = """#!/bin/sh
wc -l < "$1" > summary.txt
cat threshold >> summary.txt   # params/ sent its contents
id -un
"""
JOB = """executable = analyse.sh
arguments = table.csv
should_transfer_files = YES
transfer_input_files = table.csv, params/
output = analyse.out
transfer_output_files = summary.txt
queue
"""


@pytest.mark.skipif(not ROOT, reason="the job must run as another user than the submitter")
def test_the_readme_glidein_runs_a_job_with_inputs_and_outputs(redis_url: str,
                                                               pool_name: str) -> None:
    with open_folder("fw-glidein-xfer-") as root:
        submit_dir = root / "submitter"
        (submit_dir / "params").mkdir(parents=True)
        (submit_dir / "analyse.sh").write_text(ANALYSE)
        (submit_dir / "analyse.sh").chmod(0o755)
        (submit_dir / "table.csv").write_text("a,1\nb,2\nc,3\n")
        (submit_dir / "params" / "threshold").write_text("0.5\n")
        (submit_dir / "job.sub").write_text(JOB)
        entry = pwd.getpwnam(SUBMITTER)
        for folder, _dirs, files in os.walk(submit_dir):
            for name in [folder, *(os.path.join(folder, f) for f in files)]:
                os.chown(name, entry.pw_uid, entry.pw_gid)
        submit_dir.chmod(0o700)  # closed to everyone else, the job's user included
        pilot_home = root / "pilot"
        pilot_home.mkdir()
        pool = {"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
                "FETCHWORK_CONFIG": os.devnull}
        submitter_env = {**environ_without_config(), **pool, "USER": SUBMITTER,
                         "LOGNAME": SUBMITTER,
                         "FETCHWORK_STATE_DIR": str(submit_dir / ".state")}
        # `env -i`: the glide-in's own PATH, home and state folder, nothing else.
        pilot_env = {**pool, "PATH": "/usr/bin:/bin", "HOME": str(pilot_home),
                     "FETCHWORK_STATE_DIR": str(pilot_home / "state"),
                     "_FETCHWORK_GLIDEIN_SCRATCH": str(pilot_home),
                     "_FETCHWORK_STARTD_NOCLAIM_SHUTDOWN": "5",
                     "_FETCHWORK_STARTER_ALLOW_RUNAS_OWNER": "false",
                     "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "0.5",
                     "_FETCHWORK_POLLING_INTERVAL": "0.5", "_FETCHWORK_NUM_SLOTS": "1"}
        submitting = subprocess.Popen([sys.executable, "-m", "fetchwork", "submit", "-wait",
                                       "job.sub"], cwd=submit_dir, env=submitter_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
        wait_until(lambda: subprocess.run(
            [sys.executable, "-m", "fetchwork", "q", "-af", "ClusterId"], env=submitter_env,
            capture_output=True, text=True, check=False).stdout.strip() or submitting.poll(),
            timeout_s=60, what="the job queued")
        pilot = subprocess.run([sys.executable, "-m", "fetchwork", "glidein",
                                "--lifetime", "0:05:00"], cwd=pilot_home, env=pilot_env,
                               capture_output=True, text=True, timeout=150, check=False)
        assert pilot.returncode == 0, pilot.stderr
        assert "ran 1 job(s)" in pilot.stdout, pilot.stdout + pilot.stderr
        out, _ = submitting.communicate(timeout=60)
        assert submitting.returncode == 0, out
        assert (submit_dir / "summary.txt").read_text() == "3\n0.5\n"
        assert (submit_dir / "analyse.out").read_text() == "nobody\n"
        assert not list(pilot_home.glob("fetchwork-glidein-*"))  # its scratch went with it
