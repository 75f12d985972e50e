"""Claims against one Redis from 10,000 simulated slots, and claims behind non-matching jobs.

    python bench/scale_bench.py [--slots 10000] [--processes 4] [--seconds 15] [--job-seconds 10]
                                [--head-of-line-only]

A private embedded Redis in a temporary folder. No startd and no job
processes: each simulated slot does what a startd's fetch loop does through
the reference hooks (claim a job for its slot ad, then finish it, as a
trivial job would end at once), spread over a few processes, each slot
asking again as soon as its job ended.

- trivial jobs: one shape of job, every slot matches; claims/s, claim
  latency p50/p99 (the time a slot waits from asking to holding a job),
  Redis CPU (share of one core) and memory;
- 100 shapes: 100,000 idle jobs needing 100..10,000 MB (100 shapes), slots
  of 100..10,000 MB, so most slots cannot take the jobs at the head;
- jobs of 10 s (--job-seconds): each job holds its slot that long before it
  finishes and the slot asks again (10,000 slots: 1,000 asks a second, the
  first asks spread over 10 s); the wait from asking to holding a job;
- head of line: the latency of one claim with 0, 1,000 and 100,000 jobs the
  slot does not match queued ahead of one it does.

Prints figures only.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.connection

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import EmbeddedRedis
from fetchwork.broker.filters.gate import summary_of
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher
from fetchwork.config.ads import from_dict, parse_expr
from fetchwork.config.loader import Config

MEMORY_REQUIREMENT = {"$expr": "TARGET.Memory >= MY.RequestMemory"}
# The target: each slot holds a new job this long after asking.
TARGET_MS = 100


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


@dataclass
class Setup:
    url: str
    pool: str
    environ: dict[str, str]

    def __post_init__(self) -> None:
        # This pool has no broker service: its rules are published as its leader would
        # (no filters, no signing key: a submission is IDLE at once). A pool whose
        # leader never published them makes every new job wait for it.
        config = Config.load(environ=self.environ)
        RulesPublisher.from_config(self.broker().store, config,
                                   summary_of(load_settings(config)), "bench").publish()

    def broker(self) -> Broker:
        config = Config.load(environ=self.environ)
        return Broker(redis.Redis.from_url(self.url), pool=self.pool, config=config)


def slot_ads(first: int, count: int, memory_mb: list[int]) -> list[Any]:
    ads = []
    for number in range(first, first + count):
        ads.append(from_dict({
            "Name": f"slot1@host{number}", "Machine": f"host{number}", "SlotID": 1,
            "Memory": memory_mb[number % len(memory_mb)], "Cpus": 1,
            "State": "Unclaimed", "Activity": "Idle",
            "Start": {"$expr": "true"}}))
    return ads


def _slot_process(setup: Setup, first: int, count: int, memory_mb: list[int]
                  ) -> tuple[Broker, list[Any], list[int], float]:
    """In a slots' process: its broker client, its slot ads, its round-trip counter and
    the CPU it had spent."""
    logging.disable(logging.CRITICAL)
    return (setup.broker(), slot_ads(first, count, memory_mb), count_round_trips(),
            sum(os.times()[:2]))


def run_slots(setup: Setup, first: int, count: int, memory_mb: list[int], seconds: float,
              results: Any) -> None:
    """One process's share of the slots: ask, hold, finish, ask again, for `seconds`.
    Each slot asks again the moment its job ended; its wait runs from then until it
    holds its next job (the first ask: the start)."""
    broker, ads, sent, cpu_before = _slot_process(setup, first, count, memory_mb)
    calls: list[float] = []
    waits: list[float] = []
    empty = 0
    start = time.perf_counter()
    asked_at = [start] * count
    deadline = time.monotonic() + seconds
    index = 0
    while time.monotonic() < deadline and empty < count:
        number = index % count
        index += 1
        asked = time.perf_counter()
        job = broker.claim(ads[number])
        if job is None:
            empty += 1
            continue
        held = time.perf_counter()
        calls.append(held - asked)
        waits.append(held - asked_at[number])
        empty = 0
        job_id = f"{job['ClusterId']}.{job['ProcId']}"
        broker.finish(job_id, str(job["FetchworkClaim"]), "exit")
        asked_at[number] = time.perf_counter()
    results.put((calls, waits, sum(os.times()[:2]) - cpu_before, sent[0]))


def run_timed_slots(setup: Setup, first: int, count: int, memory_mb: list[int],
                    seconds: float, results: Any, job_s: float) -> None:
    """As `run_slots`, each job holding its slot `job_s` seconds before it finishes and
    the slot asks again; the slots first ask spread over the first `job_s` seconds, as
    in a pool whose jobs end at any time. A wait counts from the moment a slot asks
    until it holds its next job."""
    broker, ads, sent, cpu_before = _slot_process(setup, first, count, memory_mb)
    calls: list[float] = []
    waits: list[float] = []
    now = time.perf_counter()
    end = now + seconds
    due: list[tuple[float, int, Any]] = [(now + job_s * number / count, number, None)
                                         for number in range(count)]
    while due and due[0][0] < end:
        ready_at, number, job = heapq.heappop(due)
        pause_s = ready_at - time.perf_counter()
        if pause_s > 0:
            time.sleep(pause_s)  # the simulated jobs run meanwhile
        if job is not None:
            broker.finish(f"{job['ClusterId']}.{job['ProcId']}", str(job["FetchworkClaim"]),
                          "exit")
        asked = time.perf_counter()
        job = broker.claim(ads[number])
        held = time.perf_counter()
        if job is None:
            heapq.heappush(due, (held + 0.1, number, None))
            continue
        calls.append(held - asked)
        waits.append(held - ready_at)
        heapq.heappush(due, (held + job_s, number, job))
    results.put((calls, waits, sum(os.times()[:2]) - cpu_before, sent[0]))


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def count_round_trips() -> list[int]:
    """Count what this process sends to Redis (one send per command or pipeline)."""
    sent = [0]
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        send(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    return sent


def scenario(setup: Setup, name: str, jobs: list[dict[str, Any]], memory_mb: list[int],
             slots: int, processes: int, seconds: float, job_s: float = 0.0) -> None:
    broker = setup.broker()
    client = broker.client
    memory_before = int(client.info("memory")["used_memory"])
    started = time.perf_counter()
    for start in range(0, len(jobs), 10_000):
        broker.submit(jobs[start:start + 10_000], owner="bench")
    submit_s = time.perf_counter() - started
    queued_bytes = int(client.info("memory")["used_memory"]) - memory_before
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    share = slots // processes
    cpu_before, wall_before = redis_cpu_s(client), time.perf_counter()
    workers = [context.Process(target=run_timed_slots if job_s else run_slots,
                               args=(setup, n * share, share, memory_mb, seconds, results,
                                     *((job_s,) if job_s else ())))
               for n in range(processes)]
    for worker in workers:
        worker.start()
    calls: list[float] = []
    waits: list[float] = []
    slots_cpu_s, round_trips = 0.0, 0
    for _worker in workers:
        more_calls, more_waits, cpu_s, sent = results.get()
        calls += more_calls
        waits += more_waits
        slots_cpu_s += cpu_s
        round_trips += sent
    for worker in workers:
        worker.join()
    wall_s = time.perf_counter() - wall_before
    redis_share = (redis_cpu_s(client) - cpu_before) / wall_s * 100
    report(name, slots, processes, len(jobs), submit_s, wall_s,
           [value * 1000 for value in calls], [value * 1000 for value in waits], job_s)
    print(f"  Redis round trips         {round_trips / max(1, len(calls)):10.2f}   "
          f"per claim + finish (empty claims included)")
    print(f"  CPU                       {redis_share:10.0f} % of a core in Redis, "
          f"{slots_cpu_s / wall_s * 100:.0f} % in the slots' {processes} processes")
    print(f"  Redis memory              {client.info('memory')['used_memory'] / 2**20:10.1f} MB "
          f"({queued_bytes / max(1, len(jobs)):.0f} bytes per queued job)")


def report(name: str, slots: int, processes: int, jobs: int, submit_s: float, wall_s: float,
           calls_ms: list[float], waits_ms: list[float], job_s: float = 0.0) -> None:
    """Claims/s, the claim call's latency and the slots' waits (the issue's target)."""
    print(f"{name}: {slots} slots in {processes} processes, {jobs} jobs queued "
          f"({jobs / submit_s:.0f} jobs/s submitted)")
    rate = len(calls_ms) / wall_s
    print(f"  claims/s                  {rate:10.0f}   ({len(calls_ms)} claims in {wall_s:.1f} s)")
    if not calls_ms:
        return
    print(f"  claim call latency        p50 {statistics.median(calls_ms):7.2f} ms   "
          f"p99 {percentile(calls_ms, 0.99):7.2f} ms")
    if not waits_ms:
        return
    within = sum(1 for value in waits_ms if value <= TARGET_MS) / len(waits_ms) * 100
    how = (f"each job {job_s:g} s, {slots / job_s:.0f} asks/s" if job_s
           else f"all {slots} slots asking at once")
    print(f"  ask-to-job wait           p50 {statistics.median(waits_ms):7.1f} ms   "
          f"p99 {percentile(waits_ms, 0.99):7.1f} ms   ({how})")
    needs = slots / job_s if job_s else slots / (TARGET_MS / 1000)
    print(f"  target: a job within {TARGET_MS} ms of asking, every slot: "
          f"{'met' if within >= 99.0 else 'not met'} ({within:.1f} % of asks; "
          f"{needs:.0f} asks/s)")


def head_of_line(setup: Setup, ahead: int, tries: int) -> list[float]:
    """Claim latencies (ms) of a slot with `ahead` jobs it does not match before one it does."""
    broker = setup.broker()
    blocker = {"Cmd": "/bin/true", "Iwd": "/tmp", "RequestMemory": 10**6,
               "Requirements": MEMORY_REQUIREMENT}
    for start in range(0, ahead, 10_000):
        broker.submit([blocker] * min(10_000, ahead - start), owner="bench")
    slot = from_dict({"Name": "slot1@lonely", "Memory": 1000, "Cpus": 1,
                      "Start": {"$expr": "true"}})
    found = []
    for _ in range(tries):
        broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp", "RequestMemory": 10,
                        "Requirements": MEMORY_REQUIREMENT}], owner="bench")
        asked = time.perf_counter()
        job = broker.claim(slot)
        found.append((time.perf_counter() - asked) * 1000)
        if job is None:
            raise SystemExit("the matching job was not claimed")
        broker.finish(f"{job['ClusterId']}.{job['ProcId']}", str(job["FetchworkClaim"]), "exit")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=15.0,
                        help="how long the slots run in each scenario")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--job-seconds", type=float, default=10.0,
                        help="a third run: each job holds its slot this long (0: skip it)")
    parser.add_argument("--head-of-line-only", action="store_true",
                        help="only the head-of-line claims (no simulated slots)")
    options = parser.parse_args()
    logging.disable(logging.CRITICAL)
    parse_expr("true")  # fail early if the ClassAd library is missing
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    root = Path(tempfile.mkdtemp(prefix="fw-scale-bench-"))
    server = EmbeddedRedis(root / "redis")
    server.start()
    try:
        environ = {**os.environ, "FETCHWORK_STATE_DIR": str(root)}
        if not options.head_of_line_only:
            slot_scenarios(server.url, environ, options)
        print("head of line: one claim, a matching job behind non-matching ones:")
        for ahead, tries in ((0, 20), (1000, 20), (100_000, 20)):
            values = head_of_line(Setup(server.url, f"hol{ahead}", environ), ahead, tries)
            print(f"  {ahead:>7} jobs ahead       median {statistics.median(values):7.2f} ms   "
                  f"best {min(values):7.2f} ms   (n={len(values)})")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def slot_scenarios(url: str, environ: dict[str, str], options: argparse.Namespace) -> None:
    """The simulated slots: trivial jobs, then 100 shapes."""
    trivial = [{"Cmd": "/bin/true", "Iwd": "/tmp"}] * options.jobs
    scenario(Setup(url, "trivial", environ), "trivial jobs", trivial, [1000],
             options.slots, options.processes, options.seconds)
    shapes = [100 * (n % 100 + 1) for n in range(options.jobs)]
    random.Random(1).shuffle(shapes)
    shaped = [{"Cmd": "/bin/true", "Iwd": "/tmp", "RequestMemory": memory,
               "Requirements": MEMORY_REQUIREMENT} for memory in shapes]
    scenario(Setup(url, "shapes", environ), "100 shapes", shaped,
             [100 * (n + 1) for n in range(100)], options.slots, options.processes,
             options.seconds)
    if options.job_seconds > 0:
        scenario(Setup(url, "timed", environ), f"jobs of {options.job_seconds:g} s",
                 trivial, [1000], options.slots, options.processes,
                 options.seconds + options.job_seconds, options.job_seconds)


if __name__ == "__main__":
    main()
