"""Claim latency with one `python:` activation filter that answers 0, beside none.

    python bench/filter_bench.py [--claims 300]

Runs a private embedded Redis in a temporary folder and two pools on it: one
with no filter (a claim is one Lua call) and one whose cluster-wide
activation chain is a single in-process filter returning 0 (a claim picks
the job, the leader broker service runs the chain and starts the job, and
the claim takes the verdict). For each pool it queues --claims jobs, then
claims them one at a time for an idle slot and prints the median, p90 and
p99 of the time one claim takes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fetchwork.broker.client import Broker  # noqa: E402
from fetchwork.broker.connections.embedded import EmbeddedRedis  # noqa: E402
from fetchwork.broker.filters.runner import FilterCall  # noqa: E402
from fetchwork.broker.leader.service import BrokerService  # noqa: E402
from fetchwork.config.loader import Config  # noqa: E402

SLOT = {"Name": "slot1@bench", "Cpus": 1, "Memory": 1024, "Disk": 10**6}
FILTER = "python:bench.filter_bench:start_now"


def start_now(call: FilterCall) -> int:
    """The activation filter of the bench: every job may start at once."""
    return 0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def claim_latencies_ms(broker: Broker, claims: int) -> list[float]:
    broker.submit([{"Cmd": "/bin/true", "Owner": "bench"}] * claims, owner="bench")
    deadline = time.monotonic() + 60
    while broker.client.zcard(broker.keys.validating):  # the leader admits them
        if time.monotonic() > deadline:
            raise SystemExit("the pool's leader did not admit the jobs within 60 s")
        time.sleep(0.01)
    timings = []
    for _ in range(claims):
        started = time.perf_counter()
        job = broker.claim(SLOT)
        timings.append((time.perf_counter() - started) * 1000)
        if job is None:
            raise SystemExit("a claim found no job: the broker service did not answer")
    return timings


@contextlib.contextmanager
def served(broker: Broker, config: Config) -> Iterator[None]:
    """The pool's broker service in a thread of this process, once it leads (it
    publishes the pool's rules and admits new jobs)."""
    service = BrokerService.from_config(broker, config)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not service.is_leader:
            if time.monotonic() > deadline:
                raise SystemExit("the broker service did not lead within 60 s")
            time.sleep(0.01)
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def report(label: str, timings: list[float]) -> None:
    print(f"  {label:<34} median {statistics.median(timings):7.2f} ms   "
          f"p90 {percentile(timings, 0.9):7.2f} ms   p99 {percentile(timings, 0.99):7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=300, help="claims measured per pool")
    options = parser.parse_args()
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="fw-filter-bench-") as folder:
        server = EmbeddedRedis(Path(folder))
        server.start()
        try:
            client = server.client()
            plain = Config.load(environ={"FETCHWORK_STATE_DIR": folder,
                                         "FETCHWORK_CONFIG": os.devnull})
            filtered = plain.with_values(ACTIVATION_FILTER_NAMES="PASS",
                                         ACTIVATION_FILTER_PASS=FILTER)
            print(f"claim latency, one idle slot, {options.claims} claims per pool:")
            for label, name, config in (("no filter", "plain", plain),
                                        ("one python: activation filter (0)", "filtered",
                                         filtered)):
                broker = Broker(client, name, config)
                with served(broker, config):
                    report(label, claim_latencies_ms(broker, options.claims))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
