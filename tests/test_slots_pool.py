"""Partitionable slots and exclusive jobs in a whole pool: `fetchwork up` as machine
alpha (one partitionable slot of 16 CPUs on whatever this machine has) and a second
startd, beta (one partitionable slot of 4 CPUs), each with its own FULL_HOSTNAME,
NUM_CPUS and MEMORY; real hooks, starters and jobs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_pool import Up, _env, fw, history_json, q_json
from tests.waiting import wait_until

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


@contextmanager
def _root() -> Iterator[Path]:
    # Jobs run as nobody under a root test run: a folder open to all, outside pytest's.
    folder = Path(tempfile.mkdtemp(prefix="fw-slots-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def slots_pool() -> Iterator[SlotsPool]:
    with _root() as root:
        env = _env(root / "state", ASSIGN_CPU_AFFINITY="True", MEMORY_LIMIT_POLICY="hold",
                   STARTER_SAMPLE_INTERVAL="0.2")
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
