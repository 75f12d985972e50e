"""`fetchwork wait`: condor_wait's decision (pure), and the command on real log files."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fetchwork.broker.userlog import text
from fetchwork.broker.userlog.text import EventCode, Exit, Usage
from fetchwork.submit.logwait import ABORTED, EXECUTE, SUBMIT, TERMINATED, LogWait, Outcome

pytestmark = pytest.mark.timeout(60)


def feed(wait: LogWait, *events: tuple[int, int, int]) -> None:
    for code, cluster, proc in events:
        wait.see(code, cluster, proc)


def test_all_jobs_done_when_each_submitted_one_ended():
    wait = LogWait()
    feed(wait, (SUBMIT, 1, 0), (SUBMIT, 1, 1), (EXECUTE, 1, 0), (TERMINATED, 1, 0))
    assert wait.outcome(scanned=False) is None
    assert wait.outcome(scanned=True) is None
    feed(wait, (ABORTED, 1, 1))
    assert wait.outcome(scanned=True) is Outcome.ALL_DONE


def test_one_cluster_or_one_job():
    wait = LogWait(cluster=2, proc=1)
    feed(wait, (SUBMIT, 1, 0), (SUBMIT, 2, 0), (SUBMIT, 2, 1), (TERMINATED, 2, 1))
    assert wait.outcome(scanned=True) is Outcome.ALL_DONE
    wait = LogWait(cluster=2)
    feed(wait, (SUBMIT, 2, 0), (SUBMIT, 2, 1), (TERMINATED, 2, 1))
    assert wait.outcome(scanned=True) is None


def test_num_counts_ended_jobs_even_before_the_scan_ends():
    wait = LogWait(num=2)
    feed(wait, (SUBMIT, 1, 0), (SUBMIT, 1, 1), (SUBMIT, 1, 2), (TERMINATED, 1, 2))
    assert wait.outcome(scanned=True) is None
    feed(wait, (ABORTED, 1, 0))
    assert wait.outcome(scanned=False) is Outcome.NUM_DONE
    assert wait.message(Outcome.NUM_DONE) == "Specified number of jobs (2) done."


def test_a_log_without_the_jobs_fails():
    assert LogWait().outcome(scanned=True) is Outcome.NO_JOBS
    wait = LogWait(cluster=9)
    feed(wait, (SUBMIT, 1, 0))
    assert wait.outcome(scanned=True) is Outcome.NO_SUCH_JOB
    assert not Outcome.NO_SUCH_JOB.ok and not Outcome.TIME_EXPIRED.ok and Outcome.ALL_DONE.ok


def test_status_lines():
    wait = LogWait()
    assert wait.see(SUBMIT, 4, 1) == "4.1.0 submitted"
    assert wait.see(EXECUTE, 4, 1, "slot1@n") == "4.1.0 executing on host slot1@n"
    assert wait.see(TERMINATED, 4, 1) == "4.1.0 completed"


def submitted(cluster: int, proc: int) -> str:
    return text.event_text(EventCode.SUBMIT, cluster, proc, time.time(),
                           text.submitted_body("<h>"))


def terminated(cluster: int, proc: int) -> str:
    return text.event_text(EventCode.JOB_TERMINATED, cluster, proc, time.time(),
                           text.terminated_body(Exit(0), Usage()))


def start_wait(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "fetchwork", "wait", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_wait_returns_when_the_last_job_ends(tmp_path: Path):
    log = tmp_path / "job.log"
    log.write_text(submitted(5, 0) + submitted(5, 1) + terminated(5, 0))
    proc = start_wait(str(log))
    # The command must still wait: one job has not ended.
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
    with log.open("a") as handle:
        handle.write(terminated(5, 1))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == "All jobs done."


def test_wait_times_out_with_status_1(tmp_path: Path):
    log = tmp_path / "job.log"
    log.write_text(submitted(5, 0))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fetchwork", "wait", "-wait", "1", str(log)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1 and done.stdout.strip() == "Time expired."
    assert time.monotonic() - started >= 1


def test_wait_for_one_job_num_and_errors(tmp_path: Path):
    log = tmp_path / "job.log"
    log.write_text(submitted(5, 0) + submitted(5, 1) + terminated(5, 1))
    run = [sys.executable, "-m", "fetchwork", "wait"]
    done = subprocess.run([*run, str(log), "5.1"], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "All jobs done.")
    done = subprocess.run([*run, "-num", "1", str(log)], capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "Specified number of jobs (1) done.")
    done = subprocess.run([*run, str(log), "6"], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (1, "This log does not mention that job!")
    done = subprocess.run([*run, str(tmp_path / "none.log")], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1 and "none.log: no such file" in done.stderr
    assert "Traceback" not in done.stderr


def test_wait_sees_events_appended_while_it_waits(tmp_path: Path):
    log = tmp_path / "job.log"
    log.write_text(submitted(7, 0))
    proc = start_wait("-status", "-num", "1", str(log))
    with log.open("a") as handle:
        handle.write(terminated(7, 0))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["7.0.0 submitted", "7.0.0 completed",
                                "Specified number of jobs (1) done."]
