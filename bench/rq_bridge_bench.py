"""Jobs/s of a startd working an rq queue through the rq bridge, beside rq's own workers.

    python bench/rq_bridge_bench.py [--jobs 300] [--slots 2]

One private redis-server on a TCP port of 127.0.0.1; each run gets a
database of its own and the same N rq jobs (`rqtestjobs.add(1, 2)`, a
function that does nothing worth timing, so the figure is the cost of
taking, running and recording a job), enqueued at once with rq's
`Queue.enqueue_many`:

- the rq bridge: a startd with `--slots` slots (keyword RQ, in-process hooks),
  started in the folder of the job functions; each job gets its starter and
  its own Python process that performs it with rq's work horse code;
- rq's `Worker` (a fork per job) and `SimpleWorker` (no fork), as many
  `rq worker --burst` processes as slots.

The rate is counted from the first job's end to the last one's (start-up not
counted), from rq's finished-job registry. The bridge does not run as root:
under root the startd runs as nobody, on the system's python3
(tests/support/rqbridge.py). Prints figures only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import redis

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:  # run as a script: bench/ is not a package then
    sys.path.insert(0, str(BENCH_DIR.parent))
from bench.startd_bench import rate_between_ends, stop_workers  # noqa: E402
from tests.support import rqbridge  # noqa: E402

QUEUE = "bench"


def enqueue(url: str, jobs: int) -> Callable[[], int]:
    """N jobs on a fresh database; a counter of the finished ones."""
    from rq import Queue
    from rq.registry import FinishedJobRegistry

    client = redis.Redis.from_url(url)
    client.flushdb()
    queue = Queue(QUEUE, connection=client)
    queue.enqueue_many([Queue.prepare_data("rqtestjobs.add", (1, 2), result_ttl=3600)
                        for _ in range(jobs)])
    registry = FinishedJobRegistry(QUEUE, connection=client)
    return lambda: int(registry.count)


def rq_rate(root: Path, url: str, worker_class: str, jobs: int, workers: int) -> float:
    finished = enqueue(url, jobs)
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--url", url, "--burst",
                               "--quiet", "--worker-class", f"rq.worker.{worker_class}",
                               "--name", f"bench-{worker_class}-{n}-{os.getpid()}", QUEUE],
                              cwd=root, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
             for n in range(workers)]
    try:
        return rate_between_ends(finished, jobs, timeout_s=300)
    finally:
        stop_workers(procs)


def bridge_rate(root: Path, url: str, runtime: rqbridge.Runtime, jobs: int,
                slots: int) -> float:
    finished = enqueue(url, jobs)
    startd = rqbridge.BridgeStartd(root / "startd", runtime)
    startd.write_config(rqbridge.startd_config(startd.folder, url, QUEUE, slots=slots)
                        + textwrap.dedent("""
                            STARTER_INITIAL_UPDATE_INTERVAL = 3600
                            STARTER_UPDATE_INTERVAL = 3600
                        """))
    startd.start()
    try:
        return rate_between_ends(finished, jobs, timeout_s=300)
    finally:
        startd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs per run")
    parser.add_argument("--slots", type=int, default=2, help="slots / rq workers")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
          f"{args.jobs} jobs per run, {args.slots} slots / workers")
    with rqbridge.fresh_root("bench") as root:
        rqbridge.write_jobs(root)
        runtime = rqbridge.runtime(root)
        with rqbridge.rq_redis(root) as port:
            ours = bridge_rate(root, rqbridge.url(port, 1), runtime, args.jobs, args.slots)
            print(f"  {'fetchwork startd (rq bridge)':<30} {ours:8.1f} jobs/s")
            theirs = {}
            for db, worker_class in enumerate(("Worker", "SimpleWorker"), start=2):
                theirs[worker_class] = rq_rate(root, rqbridge.url(port, db), worker_class,
                                               args.jobs, args.slots)
                print(f"  {'rq ' + worker_class:<30} {theirs[worker_class]:8.1f} jobs/s")
        print("ratio bridge/rq: " + ", ".join(f"{ours / rate:.2f} x {name}"
                                              for name, rate in theirs.items()))
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
