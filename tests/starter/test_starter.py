"""The starter as the startd runs it: a real process, real hooks, real jobs.

Each test spawns `python -m fetchwork.starter` with knobs in its environment,
talks to it over stdin/stdout, and reads what the shell hooks recorded. When
the tests run as root the starter runs jobs and hooks as `nobody`, so every
directory here is reachable by other users and the record directory is
writable by them.
"""

from __future__ import annotations

import os
import pwd
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from fetchwork.config.ads import parse_ad
from tests.support.processes import alive
from tests.support.starter_bench import JOB_PYTHON, Bench, pids_in
from tests.support.waiting import wait_until

# -- a job that runs to its end ----------------------------------------------

def test_job_runs_with_its_ad_and_hooks_see_everything(bench):
    (bench.work / "input.txt").write_text("from stdin\n")
    exit_hook = bench.hook("exit")
    prepare = bench.hook("prepare", tail="echo 'Extra = \"from prepare\"'")
    run = bench.start({
        "Cmd": "/bin/sh",
        "Arguments": "-c 'cat; echo \"arg=$0 env=$MYVAR pwd=$(pwd)\"; echo oops >&2; "
                     "id -u > uid; exit 7' 'two words'",
        "Environment": "MYVAR='hello world'",
        "Iwd": str(bench.work), "In": "input.txt", "Out": "out.txt", "Err": "err.txt",
        "Custom": "kept",
    }, T_HOOK_PREPARE_JOB=prepare, T_HOOK_JOB_EXIT=exit_hook)
    started = run.event("started")
    exited = run.finish()
    assert exited["how"] == "exit"
    ad = exited["ad"]
    assert ad["ExitCode"] == 7 and ad["ExitBySignal"] is False
    assert ad["JobPid"] == started["pid"]
    assert ad["Extra"] == "from prepare" and ad["Custom"] == "kept"
    assert ad["JobDuration"] >= 0 and "JobStartDate" in ad
    assert (bench.work / "out.txt").read_text() == (
        f"from stdin\narg=two words env=hello world pwd={bench.work}\n")
    assert (bench.work / "err.txt").read_text() == "oops\n"
    expected_uid = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert int((bench.work / "uid").read_text()) == expected_uid
    assert [e["event"] for e in run.events] == [
        "prepared", "started", "state", "exited"]
    assert not run.sandbox.exists()
    starter_log = bench.base / "state" / "log" / "StarterLog.slot1"
    assert "job ended (exit): exited normally with status 7" in starter_log.read_text()

    # The prepare hook got the job ad, -----, the slot ad; the exit hook `exit`
    # and the final ad; both the HTCondor environment.
    job_ad, _, slot_ad = bench.recorded("prepare", "stdin")[0].partition("-----\n")
    assert parse_ad(job_ad)["Custom"] == "kept"
    assert parse_ad(slot_ad)["Name"] == "slot1@test"
    assert bench.recorded("exit", "args") == ["exit\n"]
    final = parse_ad(bench.recorded("exit", "stdin")[0])
    assert final["ExitCode"] == 7 and final["Extra"] == "from prepare"
    assert final["ExitReason"] == "exited normally with status 7"
    assert parse_ad(bench.recorded("exit", "jobad")[0])["ExitCode"] == 7
    for name in ("prepare", "exit"):
        env = dict(line.split("=", 1) for line in bench.recorded(name, "env")[0].splitlines()
                   if "=" in line)
        assert env["_CONDOR_JOB_AD"] == str(run.sandbox / ".job.ad")
        assert env["_CONDOR_MACHINE_AD"] == str(run.sandbox / ".machine.ad")
        assert env["_CONDOR_SCRATCH_DIR"] == str(run.sandbox)
        assert env["_CONDOR_SLOT"] == "slot1"
        assert env["_CONDOR_JOB_IWD"] == str(bench.work)
        assert env["BATCH_SYSTEM"] == "HTCondor"


def test_old_syntax_args_and_env(bench):
    echo = bench.start({"Cmd": "/bin/echo", "Args": 'a \\"b\\" c',
                        "Iwd": str(bench.work), "Out": "echo.out"})
    env = bench.start({"Cmd": "/usr/bin/env", "Env": "OLD=one;OTHER=two words",
                       "Iwd": str(bench.work), "Out": "env.out"})
    assert echo.finish()["ad"]["ExitCode"] == 0 and env.finish()["ad"]["ExitCode"] == 0
    assert (bench.work / "echo.out").read_text() == 'a "b" c\n'
    lines = (bench.work / "env.out").read_text().splitlines()
    assert "OLD=one" in lines and "OTHER=two words" in lines
    assert "_CONDOR_SLOT=slot1" in lines
    # The starter's own environment is not the job's (as in HTCondor).
    assert not any(line.startswith("PYTHONPATH=") for line in lines)


def test_death_by_signal(bench):
    run = bench.start({"Cmd": "/bin/sh", "Arguments": "-c 'kill -USR1 $$'"})
    ad = run.finish()["ad"]
    assert ad["ExitBySignal"] is True and ad["ExitSignal"] == signal.SIGUSR1
    assert "ExitCode" not in ad
    assert "signal 10" in ad["ExitReason"]


def test_the_prepare_hook_finds_the_job_ad_file_as_the_startd_wrote_it(bench):
    # Nothing changed the ad before the prepare hook: `.job.ad` is not written
    # again (same file), and the hook's stdin carries the texts as read.
    prepare = bench.hook("prepare", tail=f'stat -c %i "$_CONDOR_JOB_AD" > {bench.work}/inode')
    run = bench.start({"Cmd": "/bin/true", "Custom": "kept"}, T_HOOK_PREPARE_JOB=prepare)
    assert run.finish()["how"] == "exit"
    assert int((bench.work / "inode").read_text()) == run.job_ad_inode
    assert bench.recorded("prepare", "stdin") == [
        f"{run.job_ad_text}-----\n{run.machine_ad_text}"]


def test_prepare_failure_means_no_job_and_evict(bench):
    marker = bench.work / "ran"
    run = bench.start({"Cmd": "/bin/touch", "Arguments": str(marker)},
                      T_HOOK_PREPARE_JOB=bench.hook("prepare", tail="exit 3"),
                      T_HOOK_JOB_EXIT=bench.hook("exit"))
    exited = run.finish()
    assert exited["how"] == "evict"
    assert not marker.exists()
    assert not any(event["event"] == "started" for event in run.events)
    assert bench.recorded("exit", "args") == ["evict\n"]
    assert "prepare hook failed" in exited["ad"]["ExitReason"]


def test_a_job_that_cannot_start_is_held(bench):
    run = bench.start({"Cmd": "/nonexistent/program"}, T_HOOK_JOB_EXIT=bench.hook("exit"))
    exited = run.finish()
    assert exited["how"] == "hold"
    assert "/nonexistent/program" in exited["ad"]["HoldReason"]
    assert bench.recorded("exit", "args") == ["hold\n"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root starter switches users")
def test_a_root_starter_opens_job_files_as_the_job_user(bench):
    target = bench.hooks / "not-for-jobs"
    run = bench.start({"Cmd": "/bin/true", "Out": str(target)})
    exited = run.finish()
    assert exited["how"] == "hold"
    assert "Permission denied" in exited["ad"]["HoldReason"]
    assert not target.exists()


# -- measuring ---------------------------------------------------------------

TREE_JOB = """
import os, sys, time
hold = b"x" * (80 * 1024 * 1024)
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    pids.append(pid)
with open(sys.argv[1], "w") as handle:
    handle.write(" ".join(map(str, pids)))
time.sleep(1000)
"""


def test_tree_is_measured_and_removed_on_request(bench):
    script = bench.script("tree.py", TREE_JOB, 0o644)
    children = bench.work / "children"
    run = bench.start({"Cmd": JOB_PYTHON, "Arguments": f"{script} {children}"},
                      T_HOOK_UPDATE_JOB_INFO=bench.hook("update"),
                      T_HOOK_JOB_EXIT=bench.hook("exit"),
                      STARTER_INITIAL_UPDATE_INTERVAL="0.2", STARTER_UPDATE_INTERVAL="0.3",
                      STARTER_SAMPLE_INTERVAL="0.1")

    def big_update() -> dict[str, Any] | None:
        for text in bench.recorded("update", "stdin"):
            try:
                ad = parse_ad(text)
            except Exception:  # a hook still writing
                continue
            if ad.get("NumPids", 0) >= 3 and ad.get("ImageSize", 0) >= 60000:
                return dict(ad)
        return None

    ad = wait_until(big_update, 30, fail_if=run._died, what="an update with the whole tree")
    assert ad["JobPid"] == run.event("started")["pid"]
    assert ad["JobState"] == "Running" and ad["JobStartDate"] > 0
    assert ad["RemoteUserCpu"] >= 0 and ad["RemoteSysCpu"] >= 0
    assert any(e["event"] == "update" and e["ad"]["NumPids"] >= 3 for e in run.events)
    pids = pids_in(children)
    assert len(pids) == 2
    run.send("remove")
    exited = run.finish()
    assert exited["how"] == "remove"
    assert exited["ad"]["ExitSignal"] == signal.SIGTERM
    assert exited["ad"]["ImageSize"] >= 60000
    assert bench.recorded("exit", "args") == ["remove\n"]
    assert not any(alive(pid) for pid in pids)


def test_cpu_of_exited_children_counts(bench):
    burn = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
    run = bench.start({"Cmd": "/bin/sh", "Arguments": f"-c '({burn}); ({burn})'"},
                      STARTER_SAMPLE_INTERVAL="5")
    ad = run.finish(60)["ad"]
    assert ad["RemoteUserCpu"] + ad["RemoteSysCpu"] > 0.05


# -- control -----------------------------------------------------------------

LOOP_JOB = """#!/bin/sh
trap 'echo got-term >> {record}' {sig}
setsid sleep 1000 &
echo $! >> {pids}
(sleep 1000 & echo $! >> {pids})
while :; do echo tick >> {ticks}; sleep 0.05; done
"""


def _loop_job(bench: Bench, sig: str = "TERM") -> tuple[str, Path, Path, Path]:
    record, pids, ticks = bench.work / "record", bench.work / "pids", bench.work / "ticks"
    script = bench.script("loop.sh", LOOP_JOB.format(record=record, pids=pids, ticks=ticks,
                                                     sig=sig))
    return script, record, pids, ticks


def test_suspend_and_continue(bench):
    script, _record, _pids_file, ticks = _loop_job(bench)
    run = bench.start({"Cmd": script}, STARTER_INITIAL_UPDATE_INTERVAL="0.2",
                      STARTER_UPDATE_INTERVAL="0.2")
    pid = run.event("started")["pid"]
    wait_until(lambda: ticks.exists() and ticks.stat().st_size > 0, 20)
    run.send("suspend")
    run.event("state", state="Suspended")
    wait_until(lambda: _suspended(pid), 10, what="the job's processes stopped")
    wait_until(lambda: any(e["event"] == "update" and e["ad"]["JobState"] == "Suspended"
                           for e in run.events), 10, what="an update while suspended")
    run.send("continue")
    run.event("state", state="Running")
    wait_until(lambda: psutil.Process(pid).status() != psutil.STATUS_STOPPED, 10)
    size = ticks.stat().st_size
    wait_until(lambda: ticks.stat().st_size > size, 10, what="the job ticks again")
    run.send("kill")
    ad = run.finish()["ad"]
    assert ad["ExitSignal"] == signal.SIGKILL


def _suspended(pid: int) -> bool:
    """Whether the job's main process and its group are stopped.

    A shell caught by SIGSTOP in the middle of a vfork waits in disk-sleep for
    its child, which is itself stopped before its exec: suspended all the same.
    """
    try:
        main = psutil.Process(pid)
        group = [main] + [proc for proc in main.children(recursive=True)
                          if os.getpgid(proc.pid) == pid]
        states = {proc.status() for proc in group}
    except (psutil.NoSuchProcess, ProcessLookupError):
        return False  # a child ended while it was looked at: look again
    return psutil.STATUS_STOPPED in states and \
        states <= {psutil.STATUS_STOPPED, psutil.STATUS_DISK_SLEEP}


def test_vacate_sends_killsig_then_sigkill_and_leaves_no_orphans(bench):
    script, record, pids_file, _ticks = _loop_job(bench, sig="USR2")
    run = bench.start({"Cmd": script, "KillSig": "SIGUSR2"}, MachineMaxVacateTime="1",
                      T_HOOK_JOB_EXIT=bench.hook("exit"))
    run.event("started")
    wait_until(lambda: len(pids_in(pids_file)) == 2, 20, fail_if=run._died)
    leftovers = pids_in(pids_file)
    assert all(alive(pid) for pid in leftovers)
    run.send("vacate")
    wait_until(lambda: record.exists() and "got-term" in record.read_text(), 20)
    exited = run.finish()
    assert exited["how"] == "evict"
    assert exited["ad"]["ExitSignal"] == signal.SIGKILL
    assert bench.recorded("exit", "args") == ["evict\n"]
    wait_until(lambda: not any(alive(pid) for pid in leftovers), 10, what="no orphans")


def test_eof_on_stdin_vacates(bench):
    run = bench.start({"Cmd": "/bin/sleep", "Arguments": "1000"})
    run.event("started")
    assert run.proc.stdin is not None
    run.proc.stdin.close()
    exited = run.finish()
    assert exited["how"] == "evict" and exited["ad"]["ExitSignal"] == signal.SIGTERM


@pytest.mark.parametrize(("sig", "how", "killed_by"), [
    (signal.SIGTERM, "evict", signal.SIGTERM), (signal.SIGQUIT, "evict", signal.SIGKILL)])
def test_signals_to_the_starter(bench, sig, how, killed_by):
    run = bench.start({"Cmd": "/bin/sleep", "Arguments": "1000"})
    run.event("started")
    run.proc.send_signal(sig)
    exited = run.finish()
    assert exited["how"] == how and exited["ad"]["ExitSignal"] == killed_by


def test_exit_hook_timeout(bench):
    hook = bench.hook("exit", tail=f"echo $$ > {bench.work}/hookpid; sleep 1000")
    run = bench.start({"Cmd": "/bin/true"}, T_HOOK_JOB_EXIT=hook, T_HOOK_JOB_EXIT_TIMEOUT="1")
    exited = run.finish(30)
    assert exited["how"] == "exit" and exited["ad"]["ExitCode"] == 0
    assert "took" in run.log.read_text() and "timed out" in run.log.read_text()
    hook_pid = int((bench.work / "hookpid").read_text())
    assert not alive(hook_pid)


def test_in_process_hook_asks_the_starter_to_hold(bench):
    (bench.hooks / "holdhook.py").write_text(
        "from fetchwork.hooks import control\n\n\n"
        "def update(args, stdin_text):\n"
        "    print('noise that must not reach the event stream')\n"
        "    control.request('hold')\n")
    run = bench.start({"Cmd": "/bin/sleep", "Arguments": "1000"},
                      T_HOOK_UPDATE_JOB_INFO="python:holdhook:update",
                      STARTER_INITIAL_UPDATE_INTERVAL="0.1")
    exited = run.finish()
    assert exited["how"] == "hold"
    assert exited["ad"]["ExitSignal"] == signal.SIGTERM


def test_starter_keyword_overrides_the_job_keyword(bench):
    run = bench.start({"Cmd": "/bin/true", "HookKeyword": "ELSEWHERE"},
                      STARTER_JOB_HOOK_KEYWORD="T", T_HOOK_JOB_EXIT=bench.hook("exit"),
                      ELSEWHERE_HOOK_JOB_EXIT="/nonexistent/hook")
    assert run.finish()["how"] == "exit"
    assert bench.recorded("exit", "args") == ["exit\n"]


def test_a_killed_starter_takes_its_job_with_it(bench):
    run = bench.start({"Cmd": "/bin/sleep", "Arguments": "1000"})
    pid = run.event("started")["pid"]
    assert alive(pid)
    run.proc.kill()
    run.proc.wait(10)
    wait_until(lambda: not alive(pid), 10, what="the job died with its starter")


@pytest.mark.parametrize("ending", ["timeout", "stop request"])
def test_an_in_process_prepare_hook_that_hangs_is_given_up(bench, ending):
    # The starter's own loop watches an in-process prepare hook's timeout and
    # stop requests: the job does not run, and the exit hook hears why.
    entered = bench.work / "entered"
    (bench.hooks / "hanghook.py").write_text(
        "import time\n\n\n"
        "def prepare(args, stdin_text):\n"
        f"    open({str(entered)!r}, 'w').close()\n"
        "    time.sleep(1000)\n")
    marker = bench.work / "ran"
    knobs = {"T_HOOK_PREPARE_JOB": "python:hanghook:prepare", "T_HOOK_JOB_EXIT": bench.hook("exit")}
    if ending == "timeout":
        knobs["T_HOOK_PREPARE_JOB_TIMEOUT"] = "1"
    started = time.monotonic()
    run = bench.start({"Cmd": "/bin/touch", "Arguments": str(marker)}, **knobs)
    wait_until(entered.exists, 30, fail_if=run._died, what="the prepare hook to be called")
    if ending == "stop request":
        run.send("remove")
    exited = run.finish(30)
    assert time.monotonic() - started < 30
    assert not marker.exists()
    if ending == "timeout":
        assert exited["how"] == "evict"
        assert "timed out" in exited["ad"]["ExitReason"]
        assert bench.recorded("exit", "args") == ["evict\n"]
    else:
        assert exited["how"] == "remove"
        assert bench.recorded("exit", "args") == ["remove\n"]


@pytest.mark.parametrize("ending", ["timeout", "SIGTERM"])
def test_an_in_process_prepare_hook_is_stopped_not_left_running(bench, ending):
    # Called in the starter's own thread, a hung in-process prepare hook is
    # stopped at its timeout or by a stop signal: it never goes on afterwards.
    entered, went_on = bench.work / "entered", bench.work / "went-on"
    (bench.hooks / "stophook.py").write_text(
        "import time\n\n\n"
        "def prepare(args, stdin_text):\n"
        f"    open({str(entered)!r}, 'w').close()\n"
        "    time.sleep(3)\n"
        f"    open({str(went_on)!r}, 'w').close()\n")
    marker = bench.work / "ran"
    # The exit hook outlasts the prepare hook's sleep: an abandoned hook thread
    # would go on meanwhile, in the same process.
    knobs = {"T_HOOK_PREPARE_JOB": "python:stophook:prepare",
             "T_HOOK_JOB_EXIT": bench.hook("exit", tail="sleep 4")}
    if ending == "timeout":
        knobs["T_HOOK_PREPARE_JOB_TIMEOUT"] = "1"
    run = bench.start({"Cmd": "/bin/touch", "Arguments": str(marker)}, **knobs)
    wait_until(entered.exists, 30, fail_if=run._died, what="the prepare hook to be called")
    if ending == "SIGTERM":
        run.proc.send_signal(signal.SIGTERM)
    exited = run.finish(30)
    assert exited["how"] == "evict" and not marker.exists()
    assert ("timed out" if ending == "timeout" else "cancelled") in exited["ad"]["ExitReason"]
    assert not went_on.exists()


def test_a_stop_request_during_prepare_kills_the_hook(bench):
    marker = bench.work / "ran"
    prepare = bench.hook("prepare", tail=f"echo $$ > {bench.work}/hookpid; sleep 1000")
    run = bench.start({"Cmd": "/bin/touch", "Arguments": str(marker)},
                      T_HOOK_PREPARE_JOB=prepare, T_HOOK_JOB_EXIT=bench.hook("exit"))
    wait_until(lambda: (bench.work / "hookpid").exists(), 20, fail_if=run._died)
    run.send("remove")
    exited = run.finish()
    assert exited["how"] == "remove" and not marker.exists()
    assert bench.recorded("exit", "args") == ["remove\n"]
    assert not alive(int((bench.work / "hookpid").read_text()))


@pytest.mark.parametrize("job", [{"Cmd": "/bin/sleep", "Arguments": "1000"},
                                 {"Cmd": "/bin/true"}])
def test_the_start_is_told_after_a_moment_and_before_the_end(bench, job):
    # `started` and Running wait for the job's first moment (or its end), never
    # for more: a job that runs on is told while it runs, one that ends at once
    # is told before its end, in the same order as ever.
    run = bench.start(job)
    pid = run.event("started")["pid"]
    if job["Cmd"] == "/bin/sleep":
        assert alive(pid)
        assert [e["event"] for e in run.events][-2:] == ["started", "state"]
        run.send("remove")
    run.finish()
    kinds = [(e["event"], e.get("state")) for e in run.events]
    started = kinds.index(("started", None))
    assert kinds[started + 1] == ("state", "Running")
    assert started < kinds.index(("exited", None))
