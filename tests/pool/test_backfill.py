"""Backfill on real startds: machine alpha (one partitionable slot of 16 CPUs) and,
for strict order, machine beta (4 CPUs); `fetchwork up` runs the broker, whose
leader keeps the reservation. Jobs record when they ran; RemoteHost says where.

In the first two pools job A (8 CPUs, walltime 120 s) runs on alpha until the test
lets it end, and job H (16 CPUs) then waits for alpha: it holds the reservation."""

from __future__ import annotations

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

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from tests.support.pools import Up, fw, history_json, pool_env, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

PSLOT = {"SLOT_TYPE_1": "cpus=100%, memory=100%", "SLOT_TYPE_1_PARTITIONABLE": "True",
         "NUM_SLOTS_TYPE_1": "1"}
# A job records its start, waits for its gate file (at most two minutes), records its end.
SCRIPT = ("date +%s.%N > {tag}.start; n=0; "
          "while [ ! -f {gate} ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done; "
          "date +%s.%N > {tag}.end")


@dataclass
class Pool:
    env: dict[str, str]
    up: Up
    work: Path
    beta: subprocess.Popen[bytes] | None = None

    def died(self) -> str | None:
        if self.beta is not None and self.beta.poll() is not None:
            return f"startd beta exited {self.beta.returncode}"
        return self.up.died()

    def submit(self, tag: str, cpus: int, walltime_s: int, gate: str = "open",
               count: int = 1) -> None:
        """Job(s) `tag` (`tag0`, `tag1`, ... when several) of `cpus` CPUs."""
        script = SCRIPT.format(tag=f"{tag}$(Process)" if count > 1 else tag, gate=gate)
        (self.work / f"{tag}.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c '{script}'\"\n"
            f"request_cpus = {cpus}\nrequest_memory = {cpus * 100}\n"
            f"allowed_job_duration = {walltime_s}\n+Tag = \"{tag}\"\nqueue {count}\n")
        fw(self.env, "submit", f"{tag}.sub", cwd=self.work)

    def ids(self, tag: str) -> list[str]:
        return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in q_json(self.env)
                if ad.get("Tag") == tag]

    def state(self, tag: str) -> list[int]:
        return [ad["JobStatus"] for ad in q_json(self.env) if ad.get("Tag") == tag]

    def ran(self, name: str) -> tuple[float, float]:
        return (float((self.work / f"{name}.start").read_text()),
                float((self.work / f"{name}.end").read_text()))

    def broker(self) -> Broker:
        return Broker.from_config(Config.load(environ=self.env), start=False)


@contextmanager
def _pool(beta: bool, head: bool = True, **knobs: str) -> Iterator[Pool]:
    root = Path(tempfile.mkdtemp(prefix="fw-backfill-"))
    root.chmod(0o755)
    work = root / "work"
    work.mkdir()
    work.chmod(0o777)
    env = pool_env(root / "state", **knobs)
    alpha = {**env, **{f"_FETCHWORK_{k}": v for k, v in PSLOT.items()},
             "_FETCHWORK_FULL_HOSTNAME": "alpha", "_FETCHWORK_NUM_CPUS": "16",
             "_FETCHWORK_MEMORY": "16000"}
    up = Up(alpha, 1, root / "up.log")
    pool = Pool(env, up, work)
    try:
        wait_until(lambda: "slot1@alpha" in fw(env, "status", check=False).stdout,
                   timeout_s=60, fail_if=up.died, what="alpha's p-slot in fetchwork status")
        if beta:
            beta_env = {**alpha, "_FETCHWORK_FULL_HOSTNAME": "beta", "_FETCHWORK_NUM_CPUS": "4",
                        "_FETCHWORK_MEMORY": "4000"}
            with open(root / "beta.log", "wb") as log:
                pool.beta = subprocess.Popen([sys.executable, "-m", "fetchwork", "startd"],
                                             env=beta_env, stdout=log, stderr=subprocess.STDOUT)
            wait_until(lambda: "slot1@beta" in fw(env, "status", check=False).stdout,
                       timeout_s=60, fail_if=pool.died, what="beta's p-slot")
        (work / "open").touch()
        if not head:
            yield pool
            return
        pool.submit("a", 8, 120, gate="release.a")
        wait_until(lambda: pool.state("a") == [2], timeout_s=60, fail_if=pool.died,
                   what="job A running on alpha")
        pool.submit("h", 16, 60)
        (head,) = pool.ids("h")
        wait_until(lambda: "Reserved: machine alpha" in fw(env, "q", "-analyze", head).stdout,
                   timeout_s=60, fail_if=pool.died, what="the reservation for H")
        yield pool
    finally:
        if pool.beta is not None:
            pool.beta.send_signal(signal.SIGTERM)
            pool.beta.wait(timeout=60)
        up.stop()
        fw(env, "redis", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)


def _done(pool: Pool, count: int) -> bool:
    return len(history_json(pool.env)) >= count


def test_backfill_starts_jobs_that_fit_the_window_and_holds_back_one_that_does_not():
    with _pool(beta=False) as pool:
        (head,) = pool.ids("h")
        # Best first after H: W0 (8 CPUs, 20 s: fits the window of A's remaining
        # walltime), L (8 CPUs, 10 minutes: would delay H), W1 (like W0). W1 starting
        # shows a claim on alpha passed L over.
        pool.submit("w0", 8, 20)
        pool.submit("l", 8, 600)
        pool.submit("w1", 8, 20)
        wait_until(lambda: _done(pool, 2), timeout_s=120, fail_if=pool.died,
                   what="W0 and W1 done while A runs")
        assert pool.state("l") == [1], "L waits"

        def bypasses() -> list[int | None]:
            return [ad.get("BypassCount") for ad in q_json(pool.env) if ad.get("Tag") == "h"]

        wait_until(lambda: bypasses() == [2], timeout_s=30, fail_if=pool.died,
                   what="BypassCount 2 on H (W0 and W1 started ahead of it)")
        (pool.work / "release.a").touch()
        wait_until(lambda: _done(pool, 5), timeout_s=120, fail_if=pool.died,
                   what="A, H and L done")
        history = {ad["Tag"]: ad for ad in history_json(pool.env)}
        assert sorted(history) == ["a", "h", "l", "w0", "w1"]
        assert all(ad["LastRemoteHost"].endswith("@alpha") for ad in history.values())
        assert all(ad["ExitCode"] == 0 for ad in history.values()), history
        assert f"{history['h']['ClusterId']}.{history['h']['ProcId']}" == head
        a_start, a_end = pool.ran("a")
        h_start, _h_end = pool.ran("h")
        l_start, _l_end = pool.ran("l")
        for window_job in ("w0", "w1"):
            start, end = pool.ran(window_job)
            assert a_start < start < end < a_end, f"{window_job} ran within A's walltime"
        assert a_end <= h_start < l_start, "L started only after the reserved job H"


def test_with_backfill_off_lower_jobs_wait_for_the_reserved_one_everywhere():
    with _pool(beta=True, BACKFILL="false", SLOT_AD_LIFETIME="6") as pool:
        broker = pool.broker()
        # X (2 CPUs) would fit beta at once and W (8 CPUs, 20 s) alpha's window.
        pool.submit("x", 2, 20)
        pool.submit("w", 8, 20)
        fetched = broker.client.zscore(broker.keys.slots, "slot1@beta")
        seen: list[float] = []

        def beta_fetched_twice() -> bool:
            # beta republishes its slot ad at its fetches (every 2 s here): after two,
            # a whole claim ran since X and W were queued.
            score = broker.client.zscore(broker.keys.slots, "slot1@beta")
            if score is not None and score != (seen[-1] if seen else fetched):
                seen.append(score)
            return len(seen) >= 2

        wait_until(beta_fetched_twice, timeout_s=60, fail_if=pool.died,
                   what="two fetches by beta")
        assert pool.state("x") == [1] and pool.state("w") == [1]
        (pool.work / "release.a").touch()
        wait_until(lambda: _done(pool, 4), timeout_s=120, fail_if=pool.died,
                   what="A, H, X and W done")
        h_start, a_end = pool.ran("h")[0], pool.ran("a")[1]
        assert a_end <= h_start
        # Nothing lower started while H waited for A's CPUs. Once A ended, H could
        # start at once and its reservation was gone: X on beta (which H cannot use)
        # may then start beside it, W (alpha's CPUs) only after it.
        assert a_end <= pool.ran("x")[0] and h_start < pool.ran("w")[0]
        hosts = {ad["Tag"]: ad["LastRemoteHost"] for ad in history_json(pool.env)}
        assert hosts["h"].endswith("@alpha")


def test_an_exclusive_job_drains_the_machine_whose_jobs_end_soonest():
    with _pool(beta=True, head=False) as pool:
        # Alpha runs a job for up to 10 minutes, beta one for up to 1 minute (each
        # pinned to its machine: an empty machine would take the exclusive job at once).
        (pool.work / "alpha.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c '{SCRIPT.format(tag='on_alpha', gate='release.alpha')}'\"\n"
            "requirements = TARGET.Machine == \"alpha\"\nrequest_cpus = 1\n"
            "allowed_job_duration = 600\n+Tag = \"on_alpha\"\nqueue\n")
        fw(pool.env, "submit", "alpha.sub", cwd=pool.work)
        wait_until(lambda: pool.state("on_alpha") == [2], timeout_s=60, fail_if=pool.died,
                   what="a job running on alpha")
        (pool.work / "beta.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c '{SCRIPT.format(tag='on_beta', gate='release.beta')}'\"\n"
            "requirements = TARGET.Machine == \"beta\"\nrequest_cpus = 1\n"
            "allowed_job_duration = 60\n+Tag = \"on_beta\"\nqueue\n")
        fw(pool.env, "submit", "beta.sub", cwd=pool.work)
        wait_until(lambda: pool.state("on_beta") == [2], timeout_s=60, fail_if=pool.died,
                   what="a job running on beta")
        (pool.work / "e.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c '{SCRIPT.format(tag='e', gate='open')}'\"\n"
            "request_cpus = 1\nallowed_job_duration = 60\n+Exclusive = true\n"
            "+Tag = \"e\"\nqueue\n")
        fw(pool.env, "submit", "e.sub", cwd=pool.work)
        (exclusive,) = pool.ids("e")
        wait_until(lambda: "Reserved: all of machine beta" in fw(
            pool.env, "q", "-analyze", exclusive).stdout, timeout_s=60, fail_if=pool.died,
            what="the exclusive job reserving beta, the smallest drain")
        # A lower 1-CPU job of 10 minutes would outlast beta's drain: it goes to alpha.
        pool.submit("d", 1, 600)
        wait_until(lambda: pool.state("d") == [2] or _done(pool, 1), timeout_s=60,
                   fail_if=pool.died, what="D started")
        (pool.work / "release.beta").touch()
        wait_until(lambda: _done(pool, 3), timeout_s=120, fail_if=pool.died,
                   what="beta's job, E and D done")
        (pool.work / "release.alpha").touch()
        wait_until(lambda: _done(pool, 4), timeout_s=120, fail_if=pool.died, what="all done")
        hosts = {ad["Tag"]: ad["LastRemoteHost"] for ad in history_json(pool.env)}
        assert hosts["e"].endswith("@beta") and hosts["d"].endswith("@alpha"), hosts
        assert pool.ran("on_beta")[1] <= pool.ran("e")[0], "E ran alone on beta"
        assert pool.ran("d")[0] < pool.ran("e")[0], "D did not wait for E"
