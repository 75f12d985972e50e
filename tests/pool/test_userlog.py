"""The job event log of a real pool (`fetchwork up`): submit files with `log = job.log`,
jobs that complete, one held and released, one removed while it runs, one
evicted by stopping the pool (and the log taken up again by the restarted
broker); the log is read with htcondor2.JobEventLog, and `fetchwork wait`
returns when the jobs end and times out with exit status 1.

The pool is stood up once; the tests assert on what the scenario left.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import htcondor2
import pytest

from tests.support.folders import open_folder
from tests.support.pools import Up, fw, pool_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(400)

T = htcondor2.JobEventType


def events(log: Path) -> list[htcondor2.JobEvent]:
    return list(htcondor2.JobEventLog(str(log)).events(0)) if log.exists() else []


def seen(log: Path, cluster: int, kind: T) -> bool:
    return any(event.cluster == cluster and event.type == kind for event in events(log))


def cluster_of(done: subprocess.CompletedProcess[str]) -> int:
    return int(done.stdout.split("cluster ")[1].split(".")[0])


@dataclass
class Scenario:
    log: Path
    clusters: dict[str, int] = field(default_factory=dict)
    timed_out: subprocess.CompletedProcess[str] | None = None
    early_wait: tuple[int, str] = (-1, "")
    final_wait: subprocess.CompletedProcess[str] | None = None
    up_logs: list[Path] = field(default_factory=list)


def _submit(env: dict[str, str], work: Path, name: str, text: str) -> int:
    (work / f"{name}.sub").write_text(text)
    return cluster_of(fw(env, "submit", f"{name}.sub", cwd=work))


def _run(env: dict[str, str], work: Path, ups: list[Up]) -> Scenario:
    scenario = Scenario(log=work / "job.log")
    log = scenario.log
    up = ups[-1]
    clusters = scenario.clusters
    clusters["done"] = _submit(env, work, "done", "executable = /bin/sh\n"
                               "arguments = \"-c 'exit $(Process)'\"\nlog = job.log\nqueue 2\n")
    early = subprocess.Popen([sys.executable, "-m", "fetchwork", "wait", str(log),
                              str(clusters["done"])], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    clusters["held"] = _submit(env, work, "held", "executable = /bin/true\nhold = true\n"
                               "log = job.log\nqueue\n")
    clusters["removed"] = _submit(env, work, "removed", "executable = /bin/sleep\n"
                                  "arguments = 600\nlog = job.log\nqueue\n")
    wait_until(lambda: seen(log, clusters["removed"], T.IMAGE_SIZE), timeout_s=90,
               fail_if=up.died, what="the sleeping job's image size in the log")
    scenario.timed_out = fw(env, "wait", "-wait", "1", str(log), f"{clusters['removed']}.0",
                            check=False)
    fw(env, "rm", f"{clusters['removed']}.0")
    fw(env, "release", f"{clusters['held']}.0")
    out, _ = early.communicate(timeout=120)
    scenario.early_wait = (early.returncode, out)
    marker = work / "second-run"
    (work / "evicted.sh").write_text(f"#!/bin/sh\n[ -e {marker} ] && exit 0\nexec sleep 600\n")
    (work / "evicted.sh").chmod(0o755)
    clusters["evicted"] = _submit(env, work, "evicted", "executable = evicted.sh\n"
                                  "log = job.log\nqueue\n")
    wait_until(lambda: seen(log, clusters["evicted"], T.EXECUTE), timeout_s=90,
               fail_if=up.died, what="the job to evict running")
    assert up.stop() == 0, up.log_path.read_text()
    marker.touch()
    ups.append(Up(env, 2, work.parent / "up2.log"))
    scenario.up_logs = [one.log_path for one in ups]
    scenario.final_wait = fw(env, "wait", "-wait", "180", str(log), timeout_s=200, check=False)
    return scenario


@pytest.fixture(scope="module")
def job_root(tmp_path_factory):
    """A folder the jobs can reach (under a root test run they run as nobody, who
    cannot enter pytest's private temporary tree)."""
    if os.geteuid() != 0:
        yield tmp_path_factory.mktemp("userlog")
        return
    with open_folder("fw-userlog-") as folder:
        yield folder


@pytest.fixture(scope="module")
def scenario(job_root):
    root = job_root
    work = root / "work"
    work.mkdir()
    work.chmod(0o777)
    env = pool_env(root / "state")
    ups = [Up(env, 2, root / "up1.log")]
    try:
        wait_until(lambda: fw(env, "status", check=False).stdout.count("slot") >= 2,
                   timeout_s=60, fail_if=ups[0].died, what="two slots")
        yield _run(env, work, ups)
    finally:
        for up in ups:
            if up.process.poll() is None:
                assert up.stop() == 0, up.log_path.read_text()
        fw(env, "redis", "stop", check=False)


def by_job(scenario: Scenario, name: str) -> dict[int, list[htcondor2.JobEvent]]:
    found: dict[int, list[htcondor2.JobEvent]] = defaultdict(list)
    for event in events(scenario.log):
        if event.cluster == scenario.clusters[name] and event.type != T.IMAGE_SIZE:
            found[event.proc].append(event)
    return found


def kinds(found: list[htcondor2.JobEvent]) -> list[T]:
    return [event.type for event in found]


def test_completed_jobs_log_their_return_values(scenario):
    jobs = by_job(scenario, "done")
    assert sorted(jobs) == [0, 1]
    for proc, found in jobs.items():
        assert kinds(found) == [T.SUBMIT, T.EXECUTE, T.JOB_TERMINATED]
        assert found[-1]["ReturnValue"] == proc
        assert found[-1]["TerminatedNormally"] is True


def test_a_held_job_logs_its_hold_and_release(scenario):
    (found,) = by_job(scenario, "held").values()
    assert kinds(found) == [T.SUBMIT, T.JOB_HELD, T.JOB_RELEASED, T.EXECUTE, T.JOB_TERMINATED]
    assert found[1]["HoldReasonCode"] == 15


def test_a_removed_job_logs_its_image_size_and_abort(scenario):
    (found,) = by_job(scenario, "removed").values()
    assert kinds(found) == [T.SUBMIT, T.EXECUTE, T.JOB_ABORTED]
    sizes = [event for event in events(scenario.log)
             if event.cluster == scenario.clusters["removed"] and event.type == T.IMAGE_SIZE]
    assert sizes and sizes[0]["Size"] > 0


def test_an_evicted_job_runs_again_and_the_restarted_broker_goes_on(scenario):
    (found,) = by_job(scenario, "evicted").values()
    assert kinds(found)[:3] == [T.SUBMIT, T.EXECUTE, T.JOB_EVICTED]
    assert kinds(found)[-2:] == [T.EXECUTE, T.JOB_TERMINATED]
    # A slot of the stopping startd may fetch the job and decline it: each such
    # start is an execute event and an eviction.
    assert kinds(found)[3:-2] == [T.EXECUTE, T.JOB_EVICTED] * ((len(found) - 5) // 2)
    assert found[2]["Reason"] == "the job was evicted from its slot"


def test_no_event_is_written_twice(scenario):
    texts = scenario.log.read_text().split("...\n")
    assert len(texts) == len(set(texts))


def test_events_are_in_time_order(scenario):
    stamps = [event.timestamp for event in events(scenario.log)]
    assert stamps == sorted(stamps)


def test_wait_returns_when_the_cluster_ends(scenario):
    status, out = scenario.early_wait
    assert (status, out.strip()) == (0, "All jobs done.")


def test_wait_times_out_on_a_running_job(scenario):
    assert scenario.timed_out is not None
    assert (scenario.timed_out.returncode, scenario.timed_out.stdout.strip()) == \
        (1, "Time expired.")


def test_wait_for_the_whole_log(scenario):
    done = scenario.final_wait
    assert done is not None
    assert (done.returncode, done.stdout.strip()) == (0, "All jobs done."), done.stderr
