"""Submit throughput and submit-to-start latency, fetchwork beside rq.

    python bench/submit_bench.py [--jobs 100000] [--latency-samples 50]

Runs on a private embedded Redis in a temporary state directory (or the
broker named by FETCHWORK_BROKER), so both systems use the same server.

- throughput: jobs/s to queue N jobs (fetchwork `Broker.submit` in clusters
  of --cluster-size; rq `Queue.enqueue_many` in pipelined batches of the
  same size);
- memory: Redis bytes per queued job (both systems), and the resident
  memory of the pool's processes;
- latency: one job at a time onto an idle single-slot pool (each submitted
  --idle-s after the previous one finished); the time from
  submit to the moment the job's program runs (`/bin/date +%s.%N` writes
  it), median and p99. rq: one worker, the job function returns time.time().
- signed: N jobs submitted to the pool, whose broker service signs (as
  `fetchwork up` does): the time from the first submit to the last job
  admitted (checked, signed a batch at a time, IDLE) by the pool's leader in
  its own process; the Redis bytes per queued job once they are admitted (beside
  the unsigned figure above); and the CPU per job of the leader's signing and the
  starter's check (signing_bench.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.gate import summary_of
from fetchwork.broker.filters.leader import BATCH
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher
from fetchwork.config.loader import Config
from fetchwork.pool import Pool

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:  # run as a script: bench/ is not a package then
    sys.path.insert(0, str(BENCH_DIR.parent))
from bench.signing_bench import signing_cpu  # noqa: E402


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def fetchwork_throughput(broker: Broker, jobs: int, cluster_size: int
                         ) -> tuple[float, list[str]]:
    ad = {"Cmd": "/bin/true", "Iwd": "/tmp", "Owner": "bench"}
    started = time.perf_counter()
    left = jobs
    job_ids: list[str] = []
    while left > 0:
        batch = min(cluster_size, left)
        job_ids += broker.submit([ad] * batch, owner="bench")
        left -= batch
    return jobs / (time.perf_counter() - started), job_ids


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def where_bytes_go(broker: Broker, job_ids: list[str]) -> str:
    """Bytes per queued job by structure (MEMORY USAGE; the job hashes sampled)."""
    client, keys = broker.client, broker.keys
    sample = job_ids[:: max(1, len(job_ids) // 200)]
    hashes = sum(int(client.memory_usage(keys.job(job), samples=0) or 0) for job in sample)
    parts = {"job hash": hashes / len(sample)}
    clusters = {job.split(".")[0] for job in job_ids}
    parts["cluster hash"] = sum(int(client.memory_usage(keys.cluster(cluster), samples=0) or 0)
                                for cluster in clusters) / len(job_ids)
    for name, key in (("queue", keys.queue), ("idle", keys.idle),
                      ("autocluster index", keys.ac_members), ("events", keys.events)):
        parts[name] = int(client.memory_usage(key, samples=0) or 0) / len(job_ids)
    return ", ".join(f"{name} {size:.0f}" for name, size in parts.items())


def rss_report(pool: Pool) -> None:
    """Resident memory of the pool's processes (the startd's starters included)."""
    procs = {"redis-server": pool.redis.server_pid() if pool.redis else None}
    for name, child in pool.children.items():
        procs[name] = child.pid
    for name, pid in procs.items():
        if pid is None:
            continue
        try:
            process = psutil.Process(pid)
            rss_mb = process.memory_info().rss / 2**20
            print(f"  {name:<28} {rss_mb:8.1f} MB")
            if name == "startd":
                for kid in process.children():
                    command = " ".join(kid.cmdline())
                    label = ("starter zygote" if "fetchwork.starter.zygote" in command
                             else "starter")
                    print(f"  {label:<28} {kid.memory_info().rss / 2**20:8.1f} MB")
        except psutil.Error:
            pass


def rq_throughput(client: redis.Redis, jobs: int, batch_size: int) -> tuple[float, int]:
    from rq import Queue

    queue = Queue("bench-throughput", connection=client)
    started = time.perf_counter()
    left = jobs
    while left > 0:
        batch = min(batch_size, left)
        data = [Queue.prepare_data("bench.rq_probe.stamp") for _ in range(batch)]
        with client.pipeline() as pipe:
            queue.enqueue_many(data, pipeline=pipe)
            pipe.execute()
        left -= batch
    elapsed = time.perf_counter() - started
    stored = used_memory(client)
    queue.empty()
    return jobs / elapsed, stored


def fetchwork_latency(broker: Broker, work: Path, samples: int, idle_s: float) -> list[float]:
    latencies = []
    for index in range(samples):
        time.sleep(idle_s)  # let the slot settle back to idle (waiting for work)
        out = work / f"stamp.{index}"
        submitted = time.time()
        [job_id] = broker.submit([{"Cmd": "/bin/date", "Arguments": "+%s.%N",
                                   "Iwd": str(work), "Out": out.name}], owner="bench")
        deadline = time.monotonic() + 60
        while True:
            ad = broker.get(job_id)
            if ad is not None and ad.get("JobStatus") in (3, 4):
                break
            if ad is not None and ad.get("JobStatus") == 5:
                raise SystemExit(f"job {job_id} was held: {ad.get('HoldReason')}")
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} did not finish within 60 s")
            time.sleep(0.002)
        latencies.append(float(out.read_text().strip()) - submitted)
    return latencies


def rq_latency(url: str, samples: int, idle_s: float) -> list[float]:
    from rq import Queue

    client = redis.Redis.from_url(url)
    queue = Queue("bench-latency", connection=client)
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR.parent)}
    worker = subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--url", url,
                               "--quiet", "bench-latency"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        warm = queue.enqueue("bench.rq_probe.stamp")
        _wait_rq(warm)
        latencies = []
        for _ in range(samples):
            time.sleep(idle_s)
            submitted = time.time()
            job = queue.enqueue("bench.rq_probe.stamp")
            latencies.append(_wait_rq(job) - submitted)
        return latencies
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def _wait_rq(job: object) -> float:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        value = job.return_value(refresh=True)  # type: ignore[attr-defined]
        if value is not None:
            return float(value)
        if job.get_status(refresh=False) == "failed":  # type: ignore[attr-defined]
            raise SystemExit(f"rq job failed: {job.exc_info}")  # type: ignore[attr-defined]
        time.sleep(0.002)
    raise SystemExit("rq job did not finish within 60 s")


def signed_throughput(broker: Broker, jobs: int, cluster_size: int) -> None:
    """Submit `jobs` to a pool whose leader signs, until every one is admitted."""
    ad = {"Cmd": "/bin/true", "Iwd": "/tmp", "Requirements": False}  # never runs
    before = used_memory(broker.client)
    started = time.perf_counter()
    job_ids: list[str] = []
    for first in range(0, jobs, cluster_size):
        job_ids += broker.submit([ad] * min(cluster_size, jobs - first), owner="bench")
    submitted = time.perf_counter() - started
    while broker.client.zcard(broker.keys.validating):
        time.sleep(0.005)
    spent = time.perf_counter() - started
    # Each job names its place in its batch's stored string (lua/sigbatch.lua).
    assert broker.client.hexists(broker.keys.job(job_ids[-1]), "#s"), job_ids[-1]
    print(f"  {jobs} signed jobs through the leader   {spent:6.2f} s  {jobs / spent:8.0f} "
          f"jobs/s (submitted in {submitted:.2f} s; target < 5 s)")
    per_job = (used_memory(broker.client) - before) / jobs
    print(f"  signed jobs, queued and admitted       {per_job:6.0f} bytes of Redis per queued "
          f"job (unsigned above; rq's figure is the target)")
    print(f"    of which (bytes/job): {where_bytes_go(broker, job_ids)}, "
          f"signed batches {batch_bytes(broker) / jobs:.0f}")


def batch_bytes(broker: Broker) -> int:
    """Bytes of the stored signed batches (their strings and runs, lua/sigbatch.lua)."""
    client, keys = broker.client, broker.keys
    total = 0
    for number in client.smembers(keys.sig_batches):
        for key in (keys.sig_batch(number.decode()), keys.sig_jobs(number.decode())):
            total += int(client.memory_usage(key, samples=0) or 0)
    return total


def report(name: str, latencies: list[float]) -> None:
    ms = [value * 1000 for value in latencies]
    print(f"  {name:<28} median {statistics.median(ms):8.1f} ms   "
          f"p99 {percentile(ms, 0.99):8.1f} ms   (n={len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--cluster-size", type=int, default=1000)
    parser.add_argument("--latency-samples", type=int, default=50)
    parser.add_argument("--idle-s", type=float, default=0.5,
                        help="pause before each latency sample so the slot is idle")
    options = parser.parse_args()
    have_rq = importlib.util.find_spec("rq") is not None

    state = Path(tempfile.mkdtemp(prefix="fw-bench-"))
    environ = {**os.environ, "FETCHWORK_STATE_DIR": str(state),
               "FETCHWORK_POOL": "bench", "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "5"}
    os.environ.update(environ)
    config = Config.load(environ=environ)
    pool = Pool(config, slots=1, log_path=state / "pool.log")
    try:
        pool.start()
        client = redis.Redis.from_url(pool.url)
        broker = Broker(client, pool="bench-throughput", config=config)
        # This pool has no broker service: publish its rules as its leader would (a pool
        # whose leader never published them makes every new job wait for it).
        RulesPublisher.from_config(broker.store, config, summary_of(load_settings(config)),
                                   "bench").publish()
        print(f"submit throughput, {options.jobs} jobs "
              f"(batches of {options.cluster_size}):")
        before = used_memory(client)
        rate, job_ids = fetchwork_throughput(broker, options.jobs, options.cluster_size)
        per_job = (used_memory(client) - before) / options.jobs
        print(f"  fetchwork submit             {rate:10.0f} jobs/s   "
              f"{per_job:6.0f} bytes of Redis per queued job")
        print(f"    of which (bytes/job): {where_bytes_go(broker, job_ids)}")
        if have_rq:
            before = used_memory(client)
            rate, stored = rq_throughput(client, options.jobs, options.cluster_size)
            print(f"  rq enqueue_many              {rate:10.0f} jobs/s   "
                  f"{(stored - before) / options.jobs:6.0f} bytes of Redis per queued job")

        work = state / "work"
        work.mkdir()
        if os.geteuid() == 0:  # jobs run as nobody under a root startd
            state.chmod(0o755)
            work.chmod(0o777)
        latency_broker = Broker(client, pool="bench", config=config)
        print("submit-to-start latency, one idle slot:")
        report("fetchwork (startd+starter)",
               fetchwork_latency(latency_broker, work, options.latency_samples, options.idle_s))
        if have_rq:
            report("rq (one worker)",
                   rq_latency(pool.url, options.latency_samples, options.idle_s))
        else:
            print("rq is not installed (pip install 'fetchwork[rq]'): no rq figures")
        print(f"signed jobs, {options.jobs} (batches of {options.cluster_size}):")
        signed_throughput(latency_broker, options.jobs, options.cluster_size)
        signing_cpu(20_000, BATCH)
        print("resident memory of the pool:")
        rss_report(pool)
    finally:
        pool.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
