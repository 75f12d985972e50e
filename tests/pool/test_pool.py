"""The whole pool end to end: `fetchwork up`, submit files, q/history, hold/release,
a SIGKILL of everything, and a second startd joining.

Each test runs real processes: the embedded redis-server, the broker service,
startds with the reference hooks, starters and jobs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.pools import Up, fw, history_json, pool_env, pool_up, q_json
from tests.support.processes import alive
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def _redis_pid(state: Path) -> int | None:
    for pid_file in state.rglob("redis.pid"):
        try:
            return int(pid_file.read_text().strip())
        except ValueError:
            return None
    return None


@pytest.fixture
def pool(job_tmp):
    """A 2-slot `fetchwork up` on its own state directory."""
    with pool_up(job_tmp, 2) as running:
        yield running.env, running.up, job_tmp


def test_twenty_jobs_from_one_submit_file(pool):
    env, up, tmp_path = pool
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o777)
    (work / "job.sub").write_text(
        "executable = /bin/sh\n"
        "arguments = \"-c 'echo job $(Process) of $(Cluster); i=0; "
        "while [ $i -lt 20000 ]; do i=$((i+1)); done'\"\n"
        "output = out.$(Process)\n"
        "error = err.$(Process)\n"
        "queue 20\n")
    submitted = fw(env, "submit", "job.sub", cwd=work)
    assert "20 job(s) submitted" in submitted.stdout
    wait_until(lambda: q_json(env) == [], timeout_s=180, fail_if=up.died,
               what="an empty queue")
    history = history_json(env)
    assert len(history) == 20
    cluster = history[0]["ClusterId"]
    for ad in history:
        assert ad["JobStatus"] == 4, ad
        assert ad["ExitCode"] == 0, ad
        assert "RemoteUserCpu" in ad, ad
        assert ad["ClusterId"] == cluster
    for proc in range(20):
        assert (work / f"out.{proc}").read_text() == f"job {proc} of {cluster}\n"


def test_a_held_job_waits_until_released(pool):
    env, up, tmp_path = pool
    marker = tmp_path / "ran"
    tmp_path.chmod(0o777)
    (tmp_path / "held.sub").write_text(
        f"executable = /bin/touch\narguments = {marker}\nhold = true\nqueue\n")
    fw(env, "submit", "held.sub", cwd=tmp_path)
    jobs = q_json(env)
    assert [ad["JobStatus"] for ad in jobs] == [5]
    job_id = f"{jobs[0]['ClusterId']}.{jobs[0]['ProcId']}"
    # Slots keep fetching; a held job is never handed out.
    wait_until(lambda: fw(env, "status").stdout.count("Unclaimed") >= 2, timeout_s=30)
    assert q_json(env)[0]["JobStatus"] == 5
    assert not marker.exists()
    fw(env, "release", job_id)
    wait_until(marker.exists, timeout_s=60, fail_if=up.died, what="the released job to run")
    wait_until(lambda: q_json(env) == [], timeout_s=60)
    assert history_json(env)[0]["JobStatus"] == 4


@pytest.fixture
def fresh_state(job_tmp):
    """A state directory for a test that runs its own `fetchwork up`s; whatever
    they leave running (a test that failed half way) is stopped afterwards."""
    env = pool_env(job_tmp / "state")
    ups: list[Up] = []
    yield env, job_tmp, ups
    for up in ups:
        if up.process.poll() is None:
            up.kill_all()
        if not up.log.closed:
            up.log.close()
    fw(env, "redis", "stop", check=False)
    for proc in psutil.process_iter(["cmdline"]):
        if str(job_tmp) in " ".join(proc.info["cmdline"] or []):
            proc.kill()


def test_nothing_is_lost_when_the_whole_pool_is_killed(fresh_state):
    env, tmp_path, ups = fresh_state
    state = tmp_path / "state"
    up = Up(env, 2, tmp_path / "up1.log")
    ups.append(up)
    wait_until(lambda: fw(env, "status", check=False).stdout.count("slot") >= 2,
               timeout_s=60, fail_if=up.died)
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o777)
    # Each run leaves a file; runs before the restart hang until killed,
    # runs after it finish at once.
    restarted = tmp_path / "restarted"
    (tmp_path / "job.sh").write_text(
        "#!/bin/sh\n"
        f"touch {runs}/$1.$$\n"
        f"if [ ! -e {restarted} ]; then sleep 600; fi\n")
    (tmp_path / "job.sh").chmod(0o755)
    (tmp_path / "kill.sub").write_text(
        f"executable = {tmp_path}/job.sh\narguments = $(Process)\n"
        "+JobLeaseDuration = 4\nqueue 4\n")
    fw(env, "submit", "kill.sub", cwd=tmp_path)
    wait_until(lambda: len(list(runs.iterdir())) >= 2, timeout_s=60, fail_if=up.died,
               what="two jobs running")
    redis_pid = _redis_pid(state)
    up.kill_all()
    if redis_pid is not None:
        try:
            psutil.Process(redis_pid).kill()
        except psutil.Error:
            pass
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(tmp_path / "job.sh") in cmdline:
            proc.kill()

    before = sorted(p.name.split(".")[0] for p in runs.iterdir())
    restarted.touch()
    up = Up(env, 2, tmp_path / "up2.log")
    ups.append(up)
    wait_until(lambda: q_json(env) == [], timeout_s=120, fail_if=up.died,
               what="every job to complete after the restart")
    history = history_json(env)
    assert sorted(ad["ProcId"] for ad in history) == [0, 1, 2, 3]
    assert all(ad["JobStatus"] == 4 and ad["ExitCode"] == 0 for ad in history)
    after = sorted(p.name.split(".")[0] for p in runs.iterdir())
    # The jobs killed mid-run ran again; the others ran once.
    assert after == sorted(before * 2 + [p for p in "0123" if p not in before])
    assert up.stop() == 0, up.log_path.read_text()


def test_a_second_startd_joins_and_no_job_runs_twice(pool):
    env, up, tmp_path = pool
    second_log = tmp_path / "second.log"
    with open(second_log, "wb") as log:
        second = subprocess.Popen(
            [sys.executable, "-m", "fetchwork", "startd", "--name", "second"],
            env={**env, "_FETCHWORK_NUM_SLOTS": "2"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: fw(env, "status").stdout.count("slot") >= 4, timeout_s=60,
                   fail_if=lambda: second.poll(), what="four slots in fetchwork status")
        ledger = tmp_path / "ledger"
        ledger.mkdir()
        ledger.chmod(0o777)
        (tmp_path / "many.sub").write_text(
            f"executable = /bin/sh\narguments = \"-c 'touch {ledger}/$(Process).$$'\"\n"
            "queue 60\n")
        fw(env, "submit", "many.sub", cwd=tmp_path)
        wait_until(lambda: q_json(env) == [], timeout_s=180, fail_if=up.died)
        runs = sorted(int(p.name.split(".")[0]) for p in ledger.iterdir())
        assert runs == list(range(60))
        hosts = {str(ad.get("LastRemoteHost") or ad.get("RemoteHost")).split("@", 1)[-1]
                 for ad in history_json(env)}
        assert "second" in hosts, hosts
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0, second_log.read_text()


def test_the_reference_hooks_work_as_programs(job_tmp):
    script = Path(sys.executable).with_name("fetchwork")
    assert script.exists(), "the fetchwork console script is installed beside python"
    names = ["FETCH_WORK", "REPLY_FETCH", "EVICT_CLAIM"]
    if os.geteuid() != 0:
        # Starter hooks run as the job's user; under root that is nobody, who
        # cannot reach the test's private Redis socket, so they stay in-process.
        names += ["PREPARE_JOB", "UPDATE_JOB_INFO", "JOB_EXIT"]
    knobs = {f"FETCHWORK_HOOK_{name}": str(script) for name in names}
    knobs.update({f"FETCHWORK_HOOK_{name}_ARGS": f"hook {name}" for name in names})
    env = pool_env(job_tmp / "state", **knobs)
    up = Up(env, 2, job_tmp / "up.log")
    try:
        wait_until(lambda: fw(env, "status", check=False).stdout.count("slot") >= 2,
                   timeout_s=60, fail_if=up.died)
        work = job_tmp / "work"
        work.mkdir()
        work.chmod(0o777)
        fw(env, "submit", "-n", "3", "--output", "out.$(Process)", "--",
           "/bin/echo", "by program", cwd=work)
        wait_until(lambda: q_json(env) == [], timeout_s=120, fail_if=up.died)
        history = history_json(env)
        assert len(history) == 3
        assert all(ad["JobStatus"] == 4 and ad["ExitCode"] == 0 for ad in history)
        assert all((work / f"out.{n}").read_text() == "by program\n" for n in range(3))
        for name in names:
            wait_until(lambda name=name: f"hook FETCHWORK_HOOK_{name} ({script})"
                       in up.log_path.read_text(), timeout_s=60, what=f"{name} as a program")
    finally:
        try:
            assert up.stop() == 0, up.log_path.read_text()
        finally:
            fw(env, "redis", "stop", check=False)


def test_a_second_up_on_the_same_state_directory_is_refused(pool):
    env, up, _tmp = pool
    second = fw(env, "up", "--slots", "1", check=False, timeout_s=60)
    assert second.returncode == 1
    assert "a pool is already up" in second.stderr
    assert f"pid {up.process.pid}" in second.stderr
    assert up.died() is None


def _pool_runs(up: Up, command: str) -> list[int]:
    """The pids of the pool's processes whose command line holds `command` (a test
    running beside this one may run the same command)."""
    found = []
    for proc in psutil.Process(up.process.pid).children(recursive=True):
        try:
            if command in " ".join(proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def test_rm_and_hold_stop_running_jobs(pool):
    env, up, tmp_path = pool
    (tmp_path / "long.sub").write_text(
        "executable = /bin/sleep\narguments = 617\nqueue 2\n")
    fw(env, "submit", "long.sub", cwd=tmp_path)
    wait_until(lambda: [ad["JobStatus"] for ad in q_json(env)] == [2, 2], timeout_s=60,
               fail_if=up.died, what="both jobs running")
    sleeps = wait_until(lambda: len(found := _pool_runs(up, "sleep 617")) == 2 and found,
                        timeout_s=60, fail_if=up.died, what="both sleep processes started")
    [first, second] = sorted(f"{ad['ClusterId']}.{ad['ProcId']}" for ad in q_json(env))
    fw(env, "rm", first)
    fw(env, "hold", second)
    wait_until(lambda: [ad["JobStatus"] for ad in q_json(env)] == [5], timeout_s=60,
               fail_if=up.died, what="the removed job gone and the other held")
    [removed] = history_json(env)
    assert removed["JobStatus"] == 3
    wait_until(lambda: not any(alive(pid) for pid in sleeps)
               and not _pool_runs(up, "sleep 617"),
               timeout_s=30, what="both sleep processes killed")
    fw(env, "rm", second)
    wait_until(lambda: q_json(env) == [], timeout_s=30)
