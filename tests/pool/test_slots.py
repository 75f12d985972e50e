"""Partitionable slots and exclusive jobs in a whole pool: `fetchwork up` as machine
alpha (one partitionable slot of 16 CPUs on whatever this machine has) and a second
startd, beta (one partitionable slot of 4 CPUs), each with its own FULL_HOSTNAME,
NUM_CPUS and MEMORY; real hooks, starters and jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.folders import open_folder
from tests.support.pools import Up, fw, history_json, pool_env, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

PSLOT = {"SLOT_TYPE_1": "cpus=100%, memory=100%", "SLOT_TYPE_1_PARTITIONABLE": "True",
         "NUM_SLOTS_TYPE_1": "1"}


@dataclass
class SlotsPool:
    env: dict[str, str]
    up: Up
    beta: subprocess.Popen[bytes]
    root: Path

    def died(self) -> str | None:
        if self.beta.poll() is not None:
            return f"startd beta exited {self.beta.returncode}"
        return self.up.died()

    def work(self, name: str) -> Path:
        folder = self.root / name
        folder.mkdir()
        folder.chmod(0o777)
        return folder

    def submit(self, work: Path, text: str) -> None:
        (work / "job.sub").write_text(text)
        fw(self.env, "submit", "job.sub", cwd=work)


def _root() -> AbstractContextManager[Path]:
    # Jobs run as nobody under a root test run: a folder open to all, outside pytest's.
    return open_folder("fw-slots-")


@pytest.fixture(scope="module")
def slots_pool() -> Iterator[SlotsPool]:
    with _root() as root:
        env = pool_env(root / "state", ASSIGN_CPU_AFFINITY="True",
                       MEMORY_LIMIT_POLICY="hold", STARTER_SAMPLE_INTERVAL="0.2")
        alpha = {**env, **{f"_FETCHWORK_{k}": v for k, v in PSLOT.items()},
                 "_FETCHWORK_FULL_HOSTNAME": "alpha", "_FETCHWORK_NUM_CPUS": "16",
                 "_FETCHWORK_MEMORY": "16000"}
        up = Up(alpha, 1, root / "up.log")
        beta_env = {**alpha, "_FETCHWORK_FULL_HOSTNAME": "beta", "_FETCHWORK_NUM_CPUS": "4",
                    "_FETCHWORK_MEMORY": "4000"}
        try:
            wait_until(lambda: "slot1@alpha" in fw(env, "status", check=False).stdout,
                       timeout_s=60, fail_if=up.died, what="alpha's p-slot in fetchwork status")
            with open(root / "beta.log", "wb") as log:
                beta = subprocess.Popen([sys.executable, "-m", "fetchwork", "startd"],
                                        env=beta_env, stdout=log, stderr=subprocess.STDOUT)
            pool = SlotsPool(env, up, beta, root)
            wait_until(lambda: "slot1@beta" in fw(env, "status", check=False).stdout,
                       timeout_s=60, fail_if=pool.died, what="beta's p-slot")
            yield pool
            beta.send_signal(signal.SIGTERM)
            assert beta.wait(timeout=60) == 0, (root / "beta.log").read_text()
            assert up.stop() == 0, up.log_path.read_text()
        finally:
            if up.process.poll() is None:
                up.kill_all()
            fw(env, "redis", "stop", check=False)


def _times(path: Path) -> tuple[float, float]:
    start, end = path.read_text().split()[:2]
    return float(start), float(end)


# A job that records its start, waits until `count` jobs of its folder started
# (at most a minute), prints the cores it may run on, and records its end.
BARRIER = ("date +%s.%N > $(Process).start; touch started.$(Process); n=0; "
           "while [ $(ls | grep -c '^started') -lt {count} ] && [ $n -lt 600 ]; do "
           "sleep 0.1; n=$((n+1)); done; "
           "grep Cpus_allowed_list /proc/self/status > $(Process).cores; "
           "cat $(Process).start > $(Process).times; date +%s.%N >> $(Process).times")


def test_an_8_cpu_job_runs_beside_eight_1_cpu_jobs_on_one_partitionable_slot(slots_pool):
    pool = slots_pool
    work = pool.work("partitioned")
    script = BARRIER.format(count=9)
    pool.submit(work, (
        "executable = /bin/sh\n"
        f"arguments = \"-c '{script}'\"\n"
        "requirements = TARGET.Machine == \"alpha\"\n"
        "request_cpus = 8\nqueue 1\n"
        "request_cpus = 1\nqueue 8\n"))
    wait_until(lambda: q_json(pool.env) == [], timeout_s=180, fail_if=pool.died,
               what="the nine jobs done")
    history = history_json(pool.env)
    assert len(history) == 9 and all(ad["ExitCode"] == 0 for ad in history), history
    hosts = sorted(ad["LastRemoteHost"] for ad in history)
    assert all(host.startswith("slot1_") and host.endswith("@alpha") for host in hosts), hosts
    assert len(set(hosts)) == 9, hosts
    times = [_times(work / f"{proc}.times") for proc in range(9)]
    assert max(start for start, _end in times) < min(end for _start, end in times), \
        "all nine ran at the same time"
    cpus = {ad["ProcId"]: ad["RequestCpus"] for ad in history}
    assert sorted(cpus.values()) == [1] * 8 + [8]
    usable = sorted(os.sched_getaffinity(0))
    for proc in range(9):
        allowed = _cores((work / f"{proc}.cores").read_text())
        assert len(allowed) == min(cpus[proc], len(usable)), (proc, allowed)
        assert set(allowed) <= set(usable)


def _cores(text: str) -> list[int]:
    """`Cpus_allowed_list:\t0-1,3` -> [0, 1, 3]."""
    cores: list[int] = []
    for part in text.split(":", 1)[1].strip().split(","):
        low, _, high = part.partition("-")
        cores.extend(range(int(low), int(high or low) + 1))
    return cores


def _job(name: str, until: str = "", machine: str = "", exclusive: bool = False) -> str:
    """A submit description of one job `name` that records its start and end times in
    name.times, running until the file `until` exists (if given)."""
    wait = (f"n=0; while [ ! -e {until} ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done; "
            if until else "")
    lines = ["executable = /bin/sh",
             f"arguments = \"-c 'date +%s.%N > {name}.start; {wait}"
             f"cat {name}.start > {name}.times; date +%s.%N >> {name}.times'\"",
             f"+TestName = \"{name}\"", "request_cpus = 1"]
    if machine:
        lines.append(f"requirements = TARGET.Machine == \"{machine}\"")
    if exclusive:
        lines.append("+Exclusive = true")
    return "\n".join(lines) + "\nqueue\n"


def _exclusive_slot(env: dict[str, str]) -> dict | None:
    """The published ad of beta's dynamic slot running the exclusive job, once shown."""
    shown = json.loads(fw(env, "status", "--json").stdout)
    return next((ad for ad in shown if str(ad.get("Name")).endswith("@beta")
                 and ad.get("DynamicSlot") and ad.get("State") == "Claimed"), None)


def test_an_exclusive_job_waits_for_an_empty_machine_then_runs_alone(slots_pool):
    pool = slots_pool
    work = pool.work("exclusive")
    env = pool.env
    pool.submit(work, _job("block_alpha", "release.alpha", "alpha"))
    pool.submit(work, _job("block_beta", "release.beta", "beta"))
    wait_until(lambda: (work / "block_alpha.start").exists() and
               (work / "block_beta.start").exists(), timeout_s=60, fail_if=pool.died,
               what="a job running on each machine")
    pool.submit(work, _job("x", "release.x", exclusive=True))
    # A later small job runs on alpha: alpha fetched, and passed over the exclusive job.
    # (Short: it ends before the exclusive job's drain of a machine, see backfill.)
    pool.submit(work, _job("small", machine="alpha").replace(
        "queue\n", "allowed_job_duration = 60\nqueue\n"))
    wait_until(lambda: (work / "small.times").exists(), timeout_s=60, fail_if=pool.died,
               what="the small job done")
    assert not (work / "x.start").exists(), "the exclusive job waits while both machines run"
    (work / "release.beta").write_text("")
    wait_until(lambda: (work / "x.start").exists(), timeout_s=60, fail_if=pool.died,
               what="the exclusive job started on the emptied machine")
    shown = wait_until(lambda: _exclusive_slot(env), timeout_s=30, fail_if=pool.died,
                       what="beta's dynamic slot in fetchwork status")
    assert shown["FetchworkExclusive"] is True and shown["FetchworkRunningJobs"] == 1
    # While it runs, beta takes nothing else: four more jobs all go to alpha.
    for n in range(4):
        pool.submit(work, _job(f"later{n}"))
    wait_until(lambda: all((work / f"later{n}.times").exists() for n in range(4)),
               timeout_s=90, fail_if=pool.died, what="four later jobs done")
    (work / "release.x").write_text("")
    (work / "release.alpha").write_text("")
    names = {"block_alpha", "block_beta", "x", "small"} | {f"later{n}" for n in range(4)}
    wait_until(lambda: names <= {ad.get("TestName") for ad in history_json(env)},
               timeout_s=90, fail_if=pool.died, what="every job done")
    ran = {ad["TestName"]: str(ad.get("LastRemoteHost")).split("@")[-1]
           for ad in history_json(env) if ad.get("TestName") in names}
    assert ran["x"] == "beta" and ran["block_beta"] == "beta" and ran["small"] == "alpha"
    assert all(ran[f"later{n}"] == "alpha" for n in range(4)), ran
    x_start, x_end = _times(work / "x.times")
    assert _times(work / "block_beta.times")[1] <= x_start, "x started after beta emptied"
    for name, machine in ran.items():
        if machine == "beta" and name != "x":
            start, end = _times(work / f"{name}.times")
            assert end <= x_start or start >= x_end, f"{name} ran on beta beside x"


def test_a_job_over_its_request_memory_is_held(slots_pool):
    pool = slots_pool
    work = pool.work("memory")
    pool.submit(work, (
        "executable = /usr/bin/python3\n"
        "arguments = \"-c 'import time; b = bytearray(80 * 1024 * 1024); time.sleep(120)'\"\n"
        "+TestName = \"hog\"\nrequest_memory = 10\nqueue\n"))

    def held() -> dict | None:
        return next((ad for ad in q_json(pool.env)
                     if ad.get("TestName") == "hog" and ad["JobStatus"] == 5), None)

    ad = wait_until(held, timeout_s=90, fail_if=pool.died, what="the job held")
    assert ad["HoldReasonCode"] == 34
    assert "more than its RequestMemory of 10 MB" in ad["HoldReason"], ad["HoldReason"]
    assert ad["HoldReason"].startswith("Error from slot1_")
    assert ad["MemoryExceeded"] is True and ad["MemoryUsage"] > 10
    fw(pool.env, "rm", f"{ad['ClusterId']}.{ad['ProcId']}")
