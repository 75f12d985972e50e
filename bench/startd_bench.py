"""Trivial-job throughput, start latency and footprint of one 2-slot startd, beside rq.

    python bench/startd_bench.py [--jobs 2000] [--latency-jobs 40] [--slots 2]
                                 [--program-jobs 100] [--reuse 1000] [--rss-jobs 10000]
                                 [--latency-only]

One private pool (embedded Redis, broker, a startd with the reference
`python:` hooks) in a temporary state directory; rq runs on the same Redis.

- throughput: N `/bin/true` jobs queued at once; jobs/s from the first job's
  end to the last one's (so start-up is not counted); rq's forking `Worker`
  and its `SimpleWorker` (as many workers as slots, `--burst`) run a
  function that runs `/bin/true` the same way, with the CPU a job of their
  processes (work horses included) and Redis's; the ratios on their own line;
  the CPU a job of each of the pool's processes (the starters' is their
  zygote's, with its children, reaped or still running, and their jobs; the
  output delivery is the thread `fetchwork up` runs it in, here in this
  bench's own process), and the
  Redis commands a job (`INFO commandstats` before and after); then the same with a
  starter kept across `--reuse` jobs (a second pool, after the first, with
  STARTER_JOBS_PER_PROCESS set so; 0 skips it);
- the floor of a fork per job: the CPU of a child forked from an
  interpreter preloaded as the starter zygote is, which only spawns
  `/bin/true`, waits and exits (the least of three batches), and the rate
  it alone allows on this machine's cores;
- latency, one job at a time onto idle slots: fetch-to-start (the fetch hook
  handed the job out -> the job's program runs, `/bin/date +%s%N` writes it)
  and submit-to-start, median and p99; then rq's submit-to-start on as many
  idle forking `Worker`s as slots (`enqueue` called -> the job's `/bin/date`
  reads the clock); `bench/latency_trace.py` shows where the time goes;
  beside them the floor of such a start on this machine: `/bin/date`
  spawned after the same idle gap by a waiting fork of an interpreter
  preloaded as the zygote is, told over a socket (and spawned at once);
- footprint: the startd's resident memory after the throughput run and again
  after each 10,000 of `--rss-jobs` more jobs (10,000; 0 skips them), queued
  10,000 at a time, with its growth a job over the last half of those jobs
  (read every half second, least squares: the warm-up is left out), a starter's private
  memory (USS) while its job runs, and the CPU an idle startd (and its
  zygote) uses;
- the program form of the hooks: a `/bin/sh` fetch hook handing out job
  files from a folder, jobs/s (the cost of HTCondor-style program hooks);
- reference: fork+exec+wait of `/bin/true` from Python.

`--latency-only` runs the latency part alone (with rq's beside it).
`--jobs-per-process N` sets STARTER_JOBS_PER_PROCESS for the first pool
(default: the configuration's default); the line before its figures names
the value used.

Prints figures only; the pool's logs go to a file in the temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from fetchwork.pool import Pool
from fetchwork.startd.starters.zygoteclient import ZYGOTE_MODULE

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:  # run as a script: bench/ is not a package then
    sys.path.insert(0, str(BENCH_DIR.parent))
from bench.floors import fork_exec_ms, fork_floor_ms, start_floor_ms  # noqa: E402

# The reference fetch hook, noting when it handed each job out (in a file kept
# open, so the note adds no open and close to the path it measures).
FETCH_RECORDER = '''\
import time

from fetchwork.hooks import reference

LOG = open({log!r}, "a", buffering=1)


def fetch(args, stdin_text):
    out = reference.fetch_work(args, stdin_text)
    if out:
        job_id = _job_id(out)
        LOG.write("%s %d\\n" % (job_id, time.time_ns()))
    return out


def _job_id(text):
    values = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    return "%s.%s" % (values.get("ClusterId"), values.get("ProcId"))
'''

FETCH_PROGRAM = """\
#!/bin/sh
for job in JOBS/*; do
  [ -e "$job" ] || exit 0
  case "$job" in *.taken) continue ;; esac
  if mv "$job" "$job.taken" 2>/dev/null; then
    cat "$job.taken"
    exit 0
  fi
done
"""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker, then wait for each (SIGKILL after 30 s)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def rate_between_ends(count: Callable[[], int], total: int, timeout_s: float = 30,
                      at_first: Callable[[], None] | None = None) -> float:
    """Jobs/s from the first job's end to the last one's (`count()` jobs ended so far);
    after `timeout_s`, the rate over the jobs that ended by then. `at_first()` is
    called when the first job has ended."""
    deadline = time.monotonic() + timeout_s
    first_at = None
    first_count = 0
    while True:
        done = count()
        now = time.perf_counter()
        if first_at is None and done > 0:
            first_at, first_count = now, done
            if at_first is not None:
                at_first()
        if done >= total:
            break
        if time.monotonic() > deadline and first_at is not None:
            break
        if time.monotonic() > deadline + 60:
            raise SystemExit(f"no job ended within {timeout_s + 60:g}s")
        time.sleep(0.005)
    assert first_at is not None
    return (done - first_count) / max(now - first_at, 1e-9)


class StartdRun:
    """A private pool with `slots` slots and the recording fetch hook."""

    def __init__(self, root: Path, slots: int, jobs_per_process: int | None = None):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.fetch_log = root / "fetched.log"
        (root / "fwbench_hooks.py").write_text(FETCH_RECORDER.format(log=str(self.fetch_log)))
        self.state = root / "state"
        environ = {**os.environ, "FETCHWORK_STATE_DIR": str(self.state),
                   "FETCHWORK_POOL": "bench",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(root),
                                                               os.environ.get("PYTHONPATH")])),
                   "_FETCHWORK_FETCHWORK_HOOK_FETCH_WORK": "python:fwbench_hooks:fetch",
                   "_FETCHWORK_STARTER_INITIAL_UPDATE_INTERVAL": "3600"}
        environ.pop("_FETCHWORK_STARTER_JOBS_PER_PROCESS", None)
        os.environ.update(environ)
        extra = {}
        if jobs_per_process is not None:
            extra["_FETCHWORK_STARTER_JOBS_PER_PROCESS"] = str(jobs_per_process)
        self.config = Config.load(environ={**environ, **extra})
        self.jobs_per_process = self.config.get_int("STARTER_JOBS_PER_PROCESS")
        self.pool = Pool(self.config, slots=slots, extra_env=extra, log_path=root / "pool.log")
        self.commands_per_job: dict[str, float] = {}

    def start(self) -> Broker:
        self.pool.start()
        self.client = redis.Redis.from_url(self.pool.url)
        self.broker = Broker(self.client, pool="bench", config=self.config)
        return self.broker

    def ended(self) -> int:
        return int(self.client.zcard(self.broker.keys.history))

    def startd(self) -> psutil.Process:
        return psutil.Process(self.pool.children["startd"].pid)

    def fetched_ns(self) -> dict[str, int]:
        if not self.fetch_log.exists():
            return {}
        found = {}
        for line in self.fetch_log.read_text().splitlines():
            job_id, stamp = line.split()
            found[job_id] = int(stamp)
        return found

    def stop(self) -> None:
        self.pool.stop()


    def processes(self) -> dict[str, psutil.Process]:
        """The pool's processes by role: the zygote's CPU includes its reaped starters'."""
        startd = self.startd()
        found = {"startd": startd,
                 "broker": psutil.Process(self.pool.children["broker"].pid),
                 "Redis": psutil.Process(int(self.client.info("server")["process_id"]))}
        deadline = time.monotonic() + 30  # the startd starts its zygote once it runs
        while "starters" not in found and time.monotonic() < deadline:
            for child in startd.children():
                try:  # a starter that just ended is a zombie until it is reaped
                    if ZYGOTE_MODULE in child.cmdline():
                        found["starters"] = child
                except psutil.Error:
                    continue
            time.sleep(0.05)
        return found


def _total_s(proc: psutil.Process) -> float | None:
    """CPU seconds of `proc` with its reaped children's (None once it is gone)."""
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system + times.children_user + times.children_system


def cpu_seconds(procs: dict[str, psutil.Process],
                threads: dict[str, threading.Thread | None] | None = None) -> dict[str, float]:
    """CPU seconds of each role: its process (with reaped children), or a thread of
    this process (the output delivery `fetchwork up` runs in its own)."""
    spent = {}
    for role, proc in procs.items():
        total = _total_s(proc)
        if total is not None:
            spent[role] = total
    for role, thread in (threads or {}).items():
        if thread is not None and thread.ident is not None and thread.is_alive():
            try:
                spent[role] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:
                continue
    return spent


def live_children_s(proc: psutil.Process) -> dict[int, float]:
    """CPU seconds of each live child of `proc` (kept starters not yet reaped, whose
    time is not yet in their parent's `children_*`)."""
    found = {}
    try:
        children = proc.children()
    except psutil.Error:
        return {}
    for child in children:
        total = _total_s(child)
        if total is not None:
            found[child.pid] = total
    return found


def children_delta_s(before: dict[int, float], after: dict[int, float]) -> float:
    """What live children spent between two looks: a child gone meanwhile has its
    whole time in its parent's `children_*` now, so its part before is taken off."""
    return sum(after.values()) - sum(before.values())


def commands_per_job(before: dict[str, Any], after: dict[str, Any], jobs: int
                     ) -> dict[str, float]:
    """Redis commands a job between two `INFO commandstats`, by command (the
    commands Lua scripts run count too, each script call as one `evalsha`)."""
    found = {}
    for key, stats in after.items():
        calls = stats["calls"] - before.get(key, {}).get("calls", 0)
        if calls > 0:
            found[key.removeprefix("cmdstat_")] = calls / max(jobs, 1)
    return found


def throughput(run: StartdRun, jobs: int) -> tuple[float, dict[str, float]]:
    """Jobs/s, and the milliseconds of CPU a job each of the pool's processes spent."""
    procs = run.processes()
    commands_before = run.client.info("commandstats")
    threads = {"delivery": run.pool.delivery_thread}
    before, spent_before = run.ended(), cpu_seconds(procs, threads)
    live_before = live_children_s(procs["starters"]) if "starters" in procs else {}
    job_ids = run.broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * jobs, owner="bench")
    rate = rate_between_ends(lambda: run.ended() - before, jobs)
    done, spent = run.ended() - before, cpu_seconds(procs, threads)
    live_after = live_children_s(procs["starters"]) if "starters" in procs else {}
    per_job_ms = {role: (spent[role] - spent_before[role]) * 1000 / max(done, 1)
                  for role in spent if role in spent_before}
    if "starters" in per_job_ms:  # kept starters still running count too
        per_job_ms["starters"] += children_delta_s(live_before, live_after) * 1000 / max(done, 1)
    run.commands_per_job = commands_per_job(commands_before, run.client.info("commandstats"),
                                            done)
    run.broker.remove(job_ids)  # those left when the run stopped
    deadline = time.monotonic() + 30
    while run.client.zcard(run.broker.keys.running) and time.monotonic() < deadline:
        time.sleep(0.05)
    return rate, per_job_ms


def latencies(run: StartdRun, count: int, work: Path) -> tuple[list[float], list[float]]:
    fetch_ms, submit_ms = [], []
    for index in range(count):
        time.sleep(0.25)  # the slots are idle again, waiting for work
        out = work / f"stamp.{index}"
        before = run.ended()
        submitted_ns = time.time_ns()
        [job_id] = run.broker.submit([{"Cmd": "/bin/date", "Arguments": "+%s%N",
                                       "Iwd": str(work), "Out": out.name}], owner="bench")
        deadline = time.monotonic() + 30
        while run.ended() <= before:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} did not end within 30 s")
            time.sleep(0.002)
        started_ns = int(out.read_text().strip())
        submit_ms.append((started_ns - submitted_ns) / 1e6)
        fetched = run.fetched_ns().get(job_id)
        if fetched is not None:
            fetch_ms.append((started_ns - fetched) / 1e6)
    return fetch_ms, submit_ms


def starter_uss_mb(run: StartdRun) -> float | None:
    """Private memory of the starter of a running `/bin/sleep` job."""
    before = run.ended()
    [job_id] = run.broker.submit([{"Cmd": "/bin/sleep", "Arguments": "30", "Iwd": "/tmp"}],
                                 owner="bench")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for proc in run.startd().children(recursive=True):
                try:
                    if proc.name() == "sleep":
                        time.sleep(0.5)  # the starter's first sample and hooks are done
                        return float(proc.parent().memory_full_info().uss) / 2**20
                except psutil.Error:
                    continue
            time.sleep(0.05)
        return None
    finally:
        run.broker.remove([job_id])
        deadline = time.monotonic() + 30
        while run.ended() <= before and time.monotonic() < deadline:
            time.sleep(0.05)


def idle_cpu_percent(run: StartdRun, seconds: float = 5.0) -> float:
    procs = [run.startd(), *run.startd().children(recursive=True)]
    def total() -> float:
        spent = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
                spent += times.user + times.system
            except psutil.Error:
                pass
        return spent
    time.sleep(1.0)
    first = total()
    time.sleep(seconds)
    return (total() - first) / seconds * 100


def rq_rate(url: str, worker_class: str, jobs: int, workers: int
            ) -> tuple[float, dict[str, float]]:
    """rq's jobs/s, and the milliseconds of CPU a job of its workers (with their
    reaped work horses) and of Redis, from the first job's end to the last one's
    (the workers' start is not counted, as the pool's is not)."""
    from rq import Queue
    from rq.registry import FinishedJobRegistry

    client = redis.Redis.from_url(url)
    name = f"bench-{worker_class.lower()}"
    queue = Queue(name, connection=client)
    queue.enqueue_many([Queue.prepare_data("bench.rq_probe.run_true", result_ttl=600)
                        for _ in range(jobs)])
    queue_length = len(queue)
    registry = FinishedJobRegistry(name, connection=client)
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR.parent)}
    procs = [subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--url", url, "--burst",
                               "--quiet", "--worker-class", f"rq.worker.{worker_class}",
                               "--name", f"{name}-{n}-{os.getpid()}", name],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n in range(workers)]
    roles = {"workers": [psutil.Process(proc.pid) for proc in procs],
             "Redis": [psutil.Process(int(client.info("server")["process_id"]))]}
    looks: list[tuple[int, dict[str, float]]] = []

    def look() -> None:
        looks.append((int(registry.count), {role: sum(_total_s(proc) or 0.0 for proc in group)
                                            for role, group in roles.items()}))

    try:
        rate = rate_between_ends(lambda: int(registry.count), min(jobs, queue_length),
                                 at_first=look)
        look()
    finally:
        stop_workers(procs)
        queue.delete(delete_jobs=True)
    (first, before), (last, after) = looks[0], looks[-1]
    return rate, {role: (after[role] - before[role]) * 1000 / max(last - first, 1)
                  for role in after}


def rq_latencies(url: str, count: int, workers: int) -> list[float]:
    """rq's submit-to-start, one job at a time onto idle forking `Worker`s (as many as
    slots): `enqueue` called -> `/bin/date` in the job reads the clock, in ms."""
    from rq import Queue

    client = redis.Redis.from_url(url)
    queue = Queue("bench-latency", connection=client)
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR.parent)}
    procs = [subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--url", url,
                               "--quiet", "--name", f"bench-latency-{n}-{os.getpid()}",
                               "bench-latency"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n in range(workers)]
    try:
        _rq_result(queue.enqueue("bench.rq_probe.date_ns"))  # the workers are up
        found = []
        for _index in range(count):
            time.sleep(0.25)  # the workers are idle again, waiting for work
            submitted_ns = time.time_ns()
            job = queue.enqueue("bench.rq_probe.date_ns")
            found.append((_rq_result(job) - submitted_ns) / 1e6)
        return found
    finally:
        stop_workers(procs)
        queue.delete(delete_jobs=True)


def _rq_result(job: Any) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        value = job.return_value(refresh=True)
        if value is not None:
            return int(value)
        if job.get_status(refresh=False) == "failed":
            raise SystemExit(f"rq job failed: {job.exc_info}")
        time.sleep(0.002)
    raise SystemExit("rq job did not finish within 60 s")


def program_hooks_rate(root: Path, jobs: int, slots: int) -> float:
    """The program form: a `/bin/sh` fetch hook, `--once`, jobs/s over the whole run."""
    folder = root / "jobs"
    folder.mkdir(parents=True)
    program = root / "fetch"
    program.write_text(FETCH_PROGRAM.replace("JOBS", str(folder)))
    program.chmod(0o755)
    for number in range(jobs):
        (folder / f"{number:06d}").write_text(
            f'Cmd = "/bin/true"\nClusterId = {number + 1}\nProcId = 0\nIwd = "/tmp"\n')
    conf = root / "program.conf"
    conf.write_text(textwrap.dedent(f"""\
        FETCHWORK_STATE_DIR = {root / 'state'}
        LOG = {root / 'log'}
        EXECUTE = {root / 'execute'}
        NUM_SLOTS = {slots}
        STARTD_JOB_HOOK_KEYWORD = BENCH
        BENCH_HOOK_FETCH_WORK = {program}
        FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Busy", 300, 0)
        FETCH_WORK_MIN_INTERVAL = 0.05
        STARTER_INITIAL_UPDATE_INTERVAL = 3600
    """))
    env = {key: value for key, value in os.environ.items() if not key.startswith("_FETCHWORK_")}
    env.update(FETCHWORK_CONFIG=str(conf), FETCHWORK_STATE_DIR=str(root / "state"))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fetchwork.startd", "--once"], env=env, check=True,
                   stderr=subprocess.DEVNULL, timeout=170)
    return jobs / (time.perf_counter() - started)


def report_latency(name: str, values: list[float]) -> None:
    if values:
        print(f"  {name:<34} median {statistics.median(values):7.1f} ms   "
              f"p99 {percentile(values, 0.99):7.1f} ms   (n={len(values)})")


def run_jobs(run: StartdRun, jobs: int, timeout_s: float) -> int:
    """Queue `jobs` `/bin/true` jobs and wait for them to end; how many ended."""
    before = run.ended()
    run.broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * jobs, owner="bench")
    deadline = time.monotonic() + timeout_s
    while run.ended() - before < jobs and time.monotonic() < deadline:
        time.sleep(0.5)
    return run.ended() - before


RSS_BATCH = 10_000


def rss_run(run: StartdRun, jobs: int) -> None:
    """The startd's RSS as `jobs` more jobs run, queued 10,000 at a time: a figure after
    each batch, and the growth a job over the last half of the run (the least-squares
    slope of the readings taken there, one every half second, and the change from its
    first reading to its last), so that a warm-up early in the run is not read as
    growth."""
    startd = run.startd()
    first = run.ended()
    readings = [(first, startd.memory_info().rss)]
    left = jobs
    while left > 0:
        batch = min(left, RSS_BATCH)
        before = run.ended()
        run.broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * batch, owner="bench")
        deadline = time.monotonic() + 1800
        while (ended := run.ended()) - before < batch and time.monotonic() < deadline:
            readings.append((ended, startd.memory_info().rss))
            time.sleep(0.5)
        readings.append((run.ended(), startd.memory_info().rss))
        left -= batch
        print(f"  {'startd resident memory (RSS)':<34} {readings[-1][1] / 2**20:7.1f} MB after "
              f"{readings[-1][0]} jobs ({readings[-1][0] - before} more)")
    middle = first + (readings[-1][0] - first) / 2
    last_half = [(ended, rss) for ended, rss in readings if ended >= middle]
    if len({ended for ended, _rss in last_half}) < 2:
        return
    slope, _ = statistics.linear_regression([ended for ended, _rss in last_half],
                                            [rss for _ended, rss in last_half])
    (first_ended, first_rss), (last_ended, last_rss) = last_half[0], last_half[-1]
    # The slope reads a steady drift; the ends also catch a step (a level raised at
    # once, as when a large submission arrives), which a slope over many level
    # readings after it hides.
    print(f"  {'startd RSS growth, last half':<34} {slope / 1024:+7.3f} KB a job (least "
          f"squares over {len(last_half)} readings; end to end "
          f"{(last_rss - first_rss) / 1024 / (last_ended - first_ended):+.3f}: jobs "
          f"{first_ended} to {last_ended}, {first_rss / 2**20:.1f} -> {last_rss / 2**20:.1f} MB)")


def report_throughput(name: str, rate: float, per_job_ms: dict[str, float],
                      commands: dict[str, float] | None = None) -> None:
    print(f"  {name:<34} {rate:8.1f} jobs/s")
    print(f"    CPU a job {sum(per_job_ms.values()):.1f} ms: " + ", ".join(
        f"{role} {ms:.1f}" for role, ms in sorted(per_job_ms.items(), key=lambda kv: -kv[1])))
    if commands:
        # A script call is one round trip (`evalsha`); the commands it runs inside
        # Redis are counted too, under their own names (hget, zadd, ...).
        print(f"    Redis commands a job (INFO commandstats, the submission and the bench's "
              f"own polls included): {sum(commands.values()):.1f}: " + ", ".join(
                  f"{name} {count:.2f}" for name, count in
                  sorted(commands.items(), key=lambda kv: -kv[1]) if count >= 0.05))


def kept_starters(root: Path, slots: int, jobs: int, reuse: int
                  ) -> tuple[float, dict[str, float], dict[str, float]]:
    """Throughput, CPU a job and Redis commands a job of a second pool whose
    starters run `reuse` jobs each."""
    run = StartdRun(root, slots, reuse)
    try:
        run.start()
        rate, per_job_ms = throughput(run, jobs)
        return rate, per_job_ms, run.commands_per_job
    finally:
        run.stop()


def start_latency(run: StartdRun, jobs: int, slots: int) -> None:
    """Print fetch-to-start and submit-to-start, and rq's submit-to-start beside them."""
    work = run.root / "work"
    work.mkdir()
    work.chmod(0o777)  # jobs run as nobody under a root startd
    fetch_ms, submit_ms = latencies(run, jobs, work)
    print(f"start latency, one job at a time onto idle slots "
          f"(STARTER_JOBS_PER_PROCESS = {run.jobs_per_process}):")
    report_latency("fetch-to-start", fetch_ms)
    report_latency("submit-to-start", submit_ms)
    if jobs <= 0:
        return
    alone_ms, told_ms = start_floor_ms(jobs)
    print(f"  {'floor: a start after idling':<34} median {told_ms:7.1f} ms   (a waiting "
          f"preloaded fork told over a socket spawns /bin/date; {alone_ms:.1f} ms spawned "
          f"at once)")
    report_latency(f"rq Worker submit-to-start ({slots} workers)",
                   rq_latencies(run.pool.url, jobs, slots))


def latency_only(args: argparse.Namespace) -> None:
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    root = Path(tempfile.mkdtemp(prefix="fw-startd-bench-"))
    root.chmod(0o755)
    run = StartdRun(root / "first", args.slots, args.jobs_per_process)
    try:
        run.start()
        # The pool's first jobs start cold (the zygote's first forks, the first
        # claims' scripts): in the full run, the throughput part warms it up.
        run_jobs(run, 10, timeout_s=120)
        start_latency(run, args.latency_jobs, args.slots)
    finally:
        run.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000,
                        help="jobs per throughput run (each run stops after 30 s)")
    parser.add_argument("--latency-jobs", type=int, default=30)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--program-jobs", type=int, default=50,
                        help="jobs for the program-hook run (0: skip it)")
    parser.add_argument("--jobs-per-process", type=int, default=None,
                        help="STARTER_JOBS_PER_PROCESS of the first pool (default: the "
                             "configuration's)")
    parser.add_argument("--reuse", type=int, default=1000,
                        help="STARTER_JOBS_PER_PROCESS of the second pool, a starter kept "
                             "across jobs (0: no second pool)")
    parser.add_argument("--rss-jobs", type=int, default=10000,
                        help="jobs run before the startd's memory is read again (0: none)")
    parser.add_argument("--latency-only", action="store_true",
                        help="only the start latency, with rq's beside it")
    args = parser.parse_args()
    if args.latency_only:
        latency_only(args)
        return
    per_exec_ms = fork_exec_ms(200)
    print(f"reference: fork+exec+wait of /bin/true {per_exec_ms:.2f} ms "
          f"({1000 / per_exec_ms:.0f}/s on one core); {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    root = Path(tempfile.mkdtemp(prefix="fw-startd-bench-"))
    root.chmod(0o755)
    run = StartdRun(root / "first", args.slots, args.jobs_per_process)
    ours: dict[str, float] = {}
    try:
        run.start()
        print(f"/bin/true throughput, {args.jobs} jobs (or 30 s), {args.slots} slots / "
              "workers:")
        name = f"fetchwork, STARTER_JOBS_PER_PROCESS = {run.jobs_per_process}"
        ours[name], per_job_ms = throughput(run, args.jobs)
        report_throughput(name, ours[name], per_job_ms, run.commands_per_job)
        theirs = {}
        for worker_class in ("Worker", "SimpleWorker"):
            theirs[worker_class], rq_ms = rq_rate(run.pool.url, worker_class, args.jobs,
                                                  args.slots)
            print(f"  {'rq ' + worker_class:<34} {theirs[worker_class]:8.1f} jobs/s")
            print(f"    CPU a job {sum(rq_ms.values()):.1f} ms: " + ", ".join(
                f"{role} {ms:.1f}" for role, ms in sorted(rq_ms.items(), key=lambda kv: -kv[1])))
        if args.reuse > 0:
            name = f"fetchwork, STARTER_JOBS_PER_PROCESS = {args.reuse}"
            ours[name], per_job_ms, commands = kept_starters(root / "kept", args.slots,
                                                             args.jobs, args.reuse)
            report_throughput(name, ours[name], per_job_ms, commands)
        for name, rate in ours.items():
            print(f"ratio {name}: " + ", ".join(
                f"{rate / theirs_rate:.2f} x rq {worker_class}"
                for worker_class, theirs_rate in theirs.items()))
        floor_ms = fork_floor_ms()
        cores = os.cpu_count() or 1
        print(f"floor of a fork per job: {floor_ms:.1f} ms of CPU (a fork of an interpreter "
              f"preloaded as the zygote is, spawning /bin/true and exiting): at most "
              f"{cores * 1000 / floor_ms:.0f} jobs/s on {cores} cores with nothing else")
        start_latency(run, args.latency_jobs, args.slots)
        print("footprint:")
        startd = run.startd()
        print(f"  {'startd resident memory (RSS)':<34} "
              f"{startd.memory_info().rss / 2**20:7.1f} MB after {run.ended()} jobs")
        if args.rss_jobs > 0:
            rss_run(run, args.rss_jobs)
        uss = starter_uss_mb(run)
        if uss is not None:
            print(f"  {'starter private memory (USS)':<34} {uss:7.1f} MB")
        print(f"  {'idle startd CPU (with its zygote)':<34} {idle_cpu_percent(run):7.2f} % "
              "of a core")
    finally:
        run.stop()
    try:
        if args.program_jobs > 0:
            rate = program_hooks_rate(root / "program", args.program_jobs, args.slots)
            print(f"program-form hooks (/bin/sh fetch hook, --once, {args.program_jobs} jobs): "
                  f"{rate:.1f} jobs/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
