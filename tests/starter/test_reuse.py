"""A starter kept across jobs gives each job what a fresh starter gives it.

Every test runs the same jobs through the zygote's client twice: with a new
starter process for every job (STARTER_JOBS_PER_PROCESS = 1) and with one
starter running them in turn (3 and more), and makes the same assertions
both ways: each job's environment, sandbox, ids, limits (CPU affinity, the
memory hold), signal dispositions and kill signal, measurements and hooks
(in-process `python:` hooks, program hooks, and a prepare hook written for
HTCondor that merges attributes into the job ad); a prepare or exit hook's
crash or a job's crash never reaches the next job; and a starter is replaced
after its N jobs (under load: tests/startd/starters/test_replacement.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fetchwork.config.ads import format_ad
from fetchwork.startd.starters.zygoteclient import ForkedStarter, ZygoteClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

# A job that writes what it sees of itself on its stdout.
PROBE = """\
#!/bin/sh
echo pid=$$
echo ppid=$PPID
echo sid=$(ps -o sid= -p $$ | tr -d ' ')
echo pgid=$(ps -o pgid= -p $$ | tr -d ' ')
echo uid=$(id -u)
echo gids=$(id -G | tr ' ' ,)
echo cwd=$(pwd)
echo scratch=$_CONDOR_SCRATCH_DIR
echo jobad=$_CONDOR_JOB_AD
echo leak=${FW_LEAK:-none}
echo nofile=$(ulimit -n)
echo umask=$(umask)
grep -E '^(SigIgn|SigBlk|Cpus_allowed_list)' /proc/self/status | tr -d '\t ' | sed 's/:/=/'
grep -E '^(FromHook|ClusterId) ' "$_CONDOR_JOB_AD" | tr -d ' "'
"""

HOOKS = """\
import os

RECORD = {record!r}
STATE = {{"calls": 0}}


def prepare(args, stdin_text):
    STATE["calls"] += 1
    os.environ["FW_LEAK"] = "from-a-hook"  # the starter's own environment, not the job's
    job = stdin_text.split("-----")[0]
    with open(RECORD, "a") as handle:
        handle.write("prepare %d calls=%d %s\\n" % (os.getpid(), STATE["calls"],
                     " ".join(line.strip() for line in job.splitlines()
                              if line.startswith("ClusterId"))))
    if "CrashHook = true" in job:
        raise RuntimeError("this hook fails for this job")
    return None


def exit_hook(args, stdin_text):
    with open(RECORD, "a") as handle:
        handle.write("exit %d %s\\n" % (os.getpid(), args[-1]))
    if "CrashExitHook = true" in stdin_text:
        raise RuntimeError("this exit hook fails for this job")
    return None
"""

# A prepare hook written for HTCondor: reads the job ad and the slot ad on stdin,
# prints attributes to merge into the job ad.
HTCONDOR_PREPARE = """\
#!/bin/sh
cluster=$(sed -n 's/^ClusterId = //p' | head -1)
echo "FromHook = \\"job$cluster\\""
"""


def _env(base: Path, config_text: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("_FETCHWORK_") and key not in ("FETCHWORK_CONFIG", "FW_LEAK")}
    config = base / "reuse.conf"
    config.write_text(config_text)
    env.update(FETCHWORK_CONFIG=str(config), FETCHWORK_STATE_DIR=str(base / "state"))
    return env


class Slot:
    """One slot's jobs through a zygote client: spawn, wait, take the starter back."""

    def __init__(self, base: Path, jobs_per_process: int, config_text: str,
                 trace: Path | None = None):
        """`trace`: the file the starters note their hops in (config/latencytrace.py)."""
        self.base = base
        hooks = base / "hooks"
        hooks.mkdir(exist_ok=True)
        self.record = _world_writable(base, "record")
        (hooks / "reusehooks.py").write_text(HOOKS.format(record=str(self.record)))
        env = _env(base, config_text)
        if trace is not None:
            env["FETCHWORK_LATENCY_TRACE"] = str(trace)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hooks), env.get("PYTHONPATH")]))
        self.client = ZygoteClient(env=env)
        self.client.jobs_per_process = jobs_per_process
        self.client.keep_ahead(1)
        self.count = 0
        self.starters: list[int] = []

    def run(self, job: dict[str, Any], slot_ad: dict[str, Any] | None = None
            ) -> tuple[int, list[dict[str, Any]]]:
        """Run one job to its end; its starter's status and events."""
        return self.finish(self.start(job, slot_ad))

    def start(self, job: dict[str, Any], slot_ad: dict[str, Any] | None = None
              ) -> ForkedStarter:
        """Hand one job to the slot's starter (kept or new); the starter."""
        self.count += 1
        name = f"job{self.count}"
        sandbox = self.base / "execute" / name
        sandbox.mkdir(parents=True)
        sandbox.chmod(0o755)
        ad = {"Iwd": str(self.base), "ClusterId": self.count, "ProcId": 0, "HookKeyword": "T",
              **job}
        (sandbox / ".job.ad").write_text(format_ad(ad))
        (sandbox / ".machine.ad").write_text(format_ad({"Name": "slot1@test", "SlotID": 1,
                                                        **(slot_ad or {})}))
        starter = self.client.spawn(["--job-ad", str(sandbox / ".job.ad"),
                                     "--slot-ad", str(sandbox / ".machine.ad"),
                                     "--slot", "1", "--sandbox", str(sandbox)], 1)
        self.starters.append(starter.pid)
        return starter

    def finish(self, starter: ForkedStarter) -> tuple[int, list[dict[str, Any]]]:
        """Wait for the job `start` gave `starter` to end; the starter's status and events."""
        events = _events(starter)
        status = _status(self.client, starter)
        self.client.take_back(1, starter)
        starter.close()
        return status, events

    def close(self) -> None:
        self.client.close()


def _world_writable(base: Path, name: str) -> Path:
    folder = base / "out"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o777)
    path = folder / name
    path.touch()
    path.chmod(0o666)
    return path


def _events(starter: ForkedStarter) -> list[dict[str, Any]]:
    os.set_blocking(starter.stdout.fileno(), True)
    lines = starter.stdout.read().splitlines()
    starter.events_ended = True
    return [json.loads(line) for line in lines if line.strip()]


def _status(client: ZygoteClient, starter: ForkedStarter) -> int:
    box: list[int] = []

    def ended() -> bool:
        fd = client.fileno()
        if fd is not None:
            select.select([fd], [], [], 0.05)
        status = starter.poll()
        if status is not None:
            box.append(status)
        return bool(box)

    wait_until(ended, 60, what=f"starter {starter.pid} to finish its job")
    return box[0]


def _probe(base: Path, name: str) -> tuple[dict[str, Any], Path]:
    out = _world_writable(base, name)
    script = base / "probe.sh"
    if not script.exists():
        script.write_text(PROBE)
        script.chmod(0o755)
    return {"Cmd": str(script), "Out": str(out)}, out


def _seen(out: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)


def _exit_ad(events: list[dict[str, Any]]) -> dict[str, Any]:
    [exited] = [event for event in events if event.get("event") == "exited"]
    return dict(exited["ad"])


@pytest.fixture(params=[1, 3], ids=["fresh", "reused"])
def slot(request: pytest.FixtureRequest, job_tmp: Path) -> Iterator[Slot]:
    prepare = job_tmp / "htcondor_prepare"
    prepare.write_text(HTCONDOR_PREPARE)
    prepare.chmod(0o755)
    config = ("T_HOOK_PREPARE_JOB = python:reusehooks:prepare\n"
              "T_HOOK_JOB_EXIT = python:reusehooks:exit_hook\n"
              f"HTC_HOOK_PREPARE_JOB = {prepare}\n"
              f"STARTER_OUTCOME_DIR = {job_tmp / 'outcomes'}\n"
              "MEMORY_LIMIT_POLICY = hold\n")
    one = Slot(job_tmp, request.param, config)
    yield one
    one.close()


def _reused(slot: Slot) -> bool:
    return slot.client.jobs_per_process > 1


def test_each_job_gets_its_own_session_sandbox_environment_and_ids(slot: Slot,
                                                                    job_tmp: Path) -> None:
    seen = []
    for index in range(3):
        job, out = _probe(job_tmp, f"probe{index}")
        status, events = slot.run(job)
        assert status == 0
        seen.append((_seen(out), _exit_ad(events), slot.starters[-1]))
    for index, (facts, ad, starter_pid) in enumerate(seen):
        sandbox = str(job_tmp / "execute" / f"job{index + 1}")
        assert facts["sid"] == facts["pid"] == facts["pgid"]  # its own session and group
        assert facts["ppid"] == str(starter_pid)
        assert facts["scratch"] == sandbox and facts["jobad"] == f"{sandbox}/.job.ad"
        assert facts["cwd"] == str(job_tmp)  # Iwd
        assert facts["leak"] == "none"  # what a hook did to the starter stays there
        assert int(facts["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1)) == 0  # as subprocess
        assert facts["ClusterId"] == str(index + 1)
        assert int(ad["JobPid"]) == int(facts["pid"])
        # Removed after its job (a kept starter removes it just after its `done`).
        wait_until(lambda path=sandbox: not os.path.exists(path), 30, what=f"{sandbox} removed")
        expected_uid = str(os.getuid()) if os.geteuid() != 0 else facts["uid"]
        assert facts["uid"] == expected_uid and facts["uid"] != "0"
    # The same ids, limits and umask for every job, whichever way it was started.
    for key in ("uid", "gids", "nofile", "umask", "SigIgn", "SigBlk"):
        assert len({facts[key] for facts, _ad, _pid in seen}) == 1, key
    assert len(set(slot.starters)) == (1 if _reused(slot) else 3)


def test_each_job_is_measured_alone(slot: Slot, job_tmp: Path) -> None:
    busy = {"Cmd": "/bin/sh", "Arguments": "-c 'i=0; while [ $i -lt 300000 ]; do "
                                            "i=$((i+1)); done; sleep 0.3'"}
    _status_busy, busy_events = slot.run(busy)
    _status_idle, idle_events = slot.run({"Cmd": "/bin/true"})
    busy_ad, idle_ad = _exit_ad(busy_events), _exit_ad(idle_events)
    assert busy_ad["RemoteUserCpu"] + busy_ad["RemoteSysCpu"] > 0.1
    assert idle_ad["RemoteUserCpu"] + idle_ad["RemoteSysCpu"] < 0.1  # none of the busy job's
    assert busy_ad["ImageSize"] > 0 and busy_ad["NumPids"] >= 1
    assert idle_ad["JobPid"] != busy_ad["JobPid"]


def test_each_job_is_pinned_to_its_own_slots_cores(slot: Slot, job_tmp: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    cores = sorted(os.sched_getaffinity(0))[:2]
    pinned, out_pinned = _probe(job_tmp, "pinned")
    free, out_free = _probe(job_tmp, "free")
    slot.run(pinned, {"CpuAffinity": str(cores[0])})
    slot.run(free)
    assert _seen(out_pinned)["Cpus_allowed_list"] == str(cores[0])
    assert _seen(out_free)["Cpus_allowed_list"] != str(cores[0])


def test_hooks_see_each_job_and_a_python_hook_keeps_its_module_state(slot: Slot,
                                                                     job_tmp: Path) -> None:
    for _ in range(3):
        status, _events = slot.run({"Cmd": "/bin/true"})
        assert status == 0
    lines = slot.record.read_text().splitlines()
    prepares = [line.split() for line in lines if line.startswith("prepare")]
    assert [words[-1] for words in prepares] == ["1", "2", "3"]
    # Module state lives as long as the starter process: one process, one count.
    assert [words[2] for words in prepares] == (["calls=1", "calls=2", "calls=3"]
                                                if _reused(slot) else ["calls=1"] * 3)
    assert [line.split()[-1] for line in lines if line.startswith("exit")] == ["exit"] * 3


def test_an_htcondor_prepare_hook_program_merges_into_each_jobs_ad(slot: Slot,
                                                                  job_tmp: Path) -> None:
    outs = []
    for index in range(2):
        job, out = _probe(job_tmp, f"htc{index}")
        job["HookKeyword"] = "HTC"
        status, events = slot.run(job)
        assert status == 0
        assert _exit_ad(events)["FromHook"] == f"job{index + 1}"
        outs.append(_seen(out))
    assert [facts["FromHook"] for facts in outs] == ["job1", "job2"]


def test_a_python_hooks_crash_does_not_reach_the_next_job(slot: Slot, job_tmp: Path) -> None:
    out = _world_writable(job_tmp, "after")
    _status, crashed = slot.run({"Cmd": "/bin/true", "CrashHook": True})
    assert not any(event.get("event") == "started" for event in crashed)
    status, events = slot.run({"Cmd": "/bin/sh", "Arguments": f"-c 'echo ran > {out}'"})
    assert status == 0 and _exit_ad(events)["ExitCode"] == 0
    assert out.read_text().strip() == "ran"
    if _reused(slot):
        assert slot.starters[0] == slot.starters[1]  # the same starter went on


def test_a_jobs_crash_does_not_reach_the_next_job(slot: Slot, job_tmp: Path) -> None:
    _status, crashed = slot.run({"Cmd": "/bin/sh", "Arguments": "-c 'sleep 30 & kill -SEGV $$'"})
    assert _exit_ad(crashed)["ExitBySignal"] is True
    job, out = _probe(job_tmp, "next")
    status, events = slot.run(job)
    assert status == 0 and _exit_ad(events)["ExitCode"] == 0
    facts = _seen(out)
    assert int(facts["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1)) == 0
    # What the crashed job left running (in its session: other tests may run a
    # `sleep 30` of their own meanwhile) was killed with it.
    session = int(_exit_ad(crashed)["JobPid"])
    assert not any(_cmdline(pid) == "sleep 30" and _session(pid) == session for pid in _pids())


def test_a_python_exit_hooks_crash_does_not_reach_the_next_job(slot: Slot,
                                                               job_tmp: Path) -> None:
    status, crashed = slot.run({"Cmd": "/bin/true", "CrashExitHook": True})
    assert _exit_ad(crashed)["ExitCode"] == 0  # the job itself ran and ended
    out = _world_writable(job_tmp, "after_exit_crash")
    status, events = slot.run({"Cmd": "/bin/sh", "Arguments": f"-c 'echo ran > {out}'"})
    assert status == 0 and events[-1]["how"] == "exit" and _exit_ad(events)["ExitCode"] == 0
    assert out.read_text().strip() == "ran"
    exits = [line.split() for line in slot.record.read_text().splitlines()
             if line.startswith("exit")]
    assert len(exits) == 2  # the second job's exit hook ran too
    if _reused(slot):
        assert slot.starters[0] == slot.starters[1]


def test_each_job_gets_its_own_kill_signal(slot: Slot, job_tmp: Path) -> None:
    """Vacated, each job gets its own KillSig (HTCondor's default: SIGTERM)."""
    for index, kill_sig in enumerate(["SIGUSR1", None, "SIGUSR1"]):
        out = _world_writable(job_tmp, f"signal{index}")
        ready = _world_writable(job_tmp, f"ready{index}")
        script = job_tmp / f"trapping{index}.sh"
        script.write_text(f"#!/bin/sh\ntrap 'echo USR1 > {out}; exit 0' USR1\n"
                          f"trap 'echo TERM > {out}; exit 0' TERM\n"
                          f"echo up > {ready}\nwhile :; do sleep 0.05; done\n")
        script.chmod(0o755)
        job: dict[str, Any] = {"Cmd": str(script)}
        if kill_sig:
            job["KillSig"] = kill_sig
        starter = slot.start(job)
        _vacated(slot, starter, ready, index)
        assert out.read_text().strip() == ("USR1" if kill_sig else "TERM"), index


def _vacated(slot: Slot, starter: Any, ready: Path, index: int) -> list[dict[str, Any]]:
    """The events of job `index`, vacated once its script wrote `up` into `ready`; it
    ended evicted and its starter exited 0."""
    wait_until(lambda: ready.read_text().strip() == "up", 60, what=f"job {index} to run")
    starter.stdin.write(b"vacate\n")
    starter.stdin.flush()
    status, events = slot.finish(starter)
    assert status == 0 and events[-1]["how"] == "evict"
    return events


def test_each_job_gets_its_own_vacate_time(slot: Slot, job_tmp: Path) -> None:
    """MachineMaxVacateTime is each job's own, evaluated when it is vacated: 1 s for a
    job that ignores SIGTERM (then SIGKILL), 60 s for the next, which takes 1.5 s to
    leave after its SIGTERM and so ends on its own."""
    for index, (vacate_s, on_term) in enumerate([(1, ":"), (60, "sleep 1.5; exit 0")]):
        ready = _world_writable(job_tmp, f"vready{index}")
        script = job_tmp / f"vacating{index}.sh"
        script.write_text(f"#!/bin/sh\ntrap '{on_term}' TERM\necho up > {ready}\n"
                          "while :; do sleep 0.05; done\n")
        script.chmod(0o755)
        starter = slot.start({"Cmd": str(script)}, {"MachineMaxVacateTime": vacate_s})
        events = _vacated(slot, starter, ready, index)
        ad = _exit_ad(events)
        if index == 0:
            assert ad["ExitBySignal"] is True and ad["ExitSignal"] == signal.SIGKILL
        else:
            assert ad["ExitBySignal"] is False and ad["ExitCode"] == 0


def test_a_job_held_for_its_memory_does_not_hold_the_next_one(slot: Slot,
                                                             job_tmp: Path) -> None:
    """MEMORY_LIMIT_POLICY = hold: the job over its RequestMemory is held, and the
    request to hold it ends with it."""
    big = {"Cmd": "/usr/bin/python3", "RequestMemory": 8,
           "Arguments": "-c 'x = b\"x\" * (64 * 2**20); import time; time.sleep(60)'"}
    status, held = slot.run(big)
    assert status == 0 and held[-1]["how"] == "hold"
    assert _exit_ad(held)["MemoryExceeded"] is True
    status, events = slot.run({"Cmd": "/bin/true", "RequestMemory": 8})
    assert status == 0 and events[-1]["how"] == "exit"
    assert _exit_ad(events).get("MemoryExceeded") is not True


def test_a_control_word_reaches_only_the_job_it_was_sent_for(slot: Slot, job_tmp: Path) -> None:
    starter_args: list[str] = []
    _ = starter_args
    first = {"Cmd": "/bin/sleep", "Arguments": "30"}
    # Vacate the first job through its own control pipe, then run a second one.
    slot.count += 1
    sandbox = job_tmp / "execute" / f"job{slot.count}"
    sandbox.mkdir(parents=True)
    (sandbox / ".job.ad").write_text(format_ad({"Iwd": str(job_tmp), "ClusterId": 1,
                                                "ProcId": 0, **first}))
    (sandbox / ".machine.ad").write_text(format_ad({"Name": "slot1@test", "SlotID": 1}))
    starter = slot.client.spawn(["--job-ad", str(sandbox / ".job.ad"), "--slot-ad",
                                 str(sandbox / ".machine.ad"), "--slot", "1", "--sandbox",
                                 str(sandbox)], 1)
    slot.starters.append(starter.pid)
    # The word may come before the job runs: it is obeyed either way.
    starter.stdin.write(b"vacate\n")
    starter.stdin.flush()
    events = _events(starter)
    assert _status(slot.client, starter) == 0
    assert events[-1]["how"] == "evict"
    slot.client.take_back(1, starter)
    starter.close()
    status, events = slot.run({"Cmd": "/bin/true"})
    assert status == 0 and events[-1]["how"] == "exit"


def test_a_starter_is_replaced_after_its_jobs(job_tmp: Path) -> None:
    one = Slot(job_tmp, 3, f"STARTER_OUTCOME_DIR = {job_tmp / 'outcomes'}\n")
    try:
        for _ in range(7):
            status, _events = one.run({"Cmd": "/bin/true"})
            assert status == 0
        assert [one.starters.count(pid) for pid in dict.fromkeys(one.starters)] == [3, 3, 1]
        first = one.starters[0]
        wait_until(lambda: _gone(first), 30, what=f"starter {first} to exit after 3 jobs")
    finally:
        one.close()


def test_a_kept_starter_leaves_when_the_startd_lets_it_go(job_tmp: Path) -> None:
    one = Slot(job_tmp, 5, f"STARTER_OUTCOME_DIR = {job_tmp / 'outcomes'}\n")
    try:
        one.run({"Cmd": "/bin/true"})
        [pid] = one.client.kept().values()
        one.client.let_go_kept(1)
        wait_until(lambda: _gone(pid), 30, what=f"kept starter {pid} to leave")
    finally:
        one.close()


def test_a_kept_starter_that_died_is_replaced(job_tmp: Path) -> None:
    one = Slot(job_tmp, 5, f"STARTER_OUTCOME_DIR = {job_tmp / 'outcomes'}\n")
    try:
        one.run({"Cmd": "/bin/true"})
        [pid] = one.client.kept().values()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: _gone(pid), 30, what=f"kept starter {pid} to die")
        status, _events = one.run({"Cmd": "/bin/true"})
        assert status == 0 and one.starters[-1] != pid
    finally:
        one.close()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_a_kept_starter_says_done_before_it_removes_its_jobs_sandbox(job_tmp: Path) -> None:
    # The removal is off the slot's path: the startd hears `done` and fetches while the
    # starter removes the sandbox; a starter's last job's sandbox goes before it exits.
    trace = job_tmp / "trace"
    slot = Slot(job_tmp, 2, "", trace=trace)
    try:
        sandboxes = []
        for _ in range(2):
            status, _events = slot.run({"Cmd": "/bin/true"})
            assert status == 0
            sandboxes.append(job_tmp / "execute" / f"job{slot.count}")
        assert len(set(slot.starters)) == 1
    finally:
        slot.close()

    def hops() -> list[str]:
        return [line.split()[0] for line in trace.read_text().splitlines()]

    wait_until(lambda: hops().count("starter.sandbox_removed") == 2, 30,
               what="both sandboxes removed")
    seen = [hop for hop in hops() if hop in ("starter.exited_sent", "starter.done_sent",
                                             "starter.sandbox_removed")]
    assert seen == ["starter.exited_sent", "starter.done_sent", "starter.sandbox_removed",
                    "starter.exited_sent", "starter.sandbox_removed"], seen
    assert not any(path.exists() for path in sandboxes)
