"""Where a job's start latency goes: one job at a time onto idle slots, hop by hop.

    python bench/latency_trace.py [--jobs 40] [--slots 2] [--jobs-per-process N] [--each]

One private pool as `startd_bench.py` runs it (embedded Redis, the broker
service, which signs jobs as `fetchwork up`'s does, a startd with the
reference `python:` hooks), with FETCHWORK_LATENCY_TRACE set so the startd,
its starters and the claim note when they reach each hop
(config/latencytrace.py), the bench's hook module noting when the fetch hook
hands the job out and when the prepare hook runs, and a Redis MONITOR
connection noting when Redis ran each command (its own clock, the same
machine's). For each job, the first time of each hop after its submission:

  submit call            the bench calls Broker.submit
  stage.lua              Redis runs the staging script (the job's hash)
  submit.lua             Redis runs the submission (queue, idle or waiting)
  submit returned        Broker.submit returns
  leader read            the leader's pass reads the waiting set (signing pool:
                         read_waiting.lua, the set's head with its ads; a ZRANGE
                         of the set in code without that script)
  admit_signed.lua       Redis runs the signed admission (the job IDLE); before
                         the leader's read when the job's event named it
  claim woken            the idle slot's claim sees the job's IDLE event
  claim_quiet.lua        Redis runs the claim
  fetch hook returned    the fetch hook hands the job's ad out
  startd fetched         the startd's loop takes the fetch hook's result
  startd handover        the startd hands the job to a starter
  sandbox made           the startd has written the job's sandbox and ads
  job sent to a starter  the startd has sent the job to a kept or standby starter
  starter received       the starter (forked ahead, or kept) has the job
  starter configured     its configuration read, its logs set up
  starter ads read       the two ads read from the sandbox
  signature checked      the job's signature checked, its user chosen
  starter running        its signals and wake-up pipe set up
  prepare hook called    the in-process prepare hook starts
  prepare hook returned  and returns
  spawn called           the starter calls the job's spawn
  job spawned            the starter's spawn call returned
  program runs           the job (`/bin/date +%s%N`) reads the clock

It prints each hop's median and p99 time after the one before it (in the
order of their medians), and the
two figures startd_bench.py reports: fetch-to-start and submit-to-start.
Prints figures only; the pool's logs go to a file in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:  # run as a script: bench/ is not a package then
    sys.path.insert(0, str(BENCH_DIR.parent))
from bench.startd_bench import StartdRun, percentile  # noqa: E402
from fetchwork.broker.store import scripts  # noqa: E402

# config/latencytrace.py's knob, spelt here so the script also runs against code
# without the trace (its Redis and hook hops only), for a comparison.
TRACE_ENV_VAR = "FETCHWORK_LATENCY_TRACE"

# The reference hooks, each noting in the trace when it is called, hands out or runs
# (the trace's file kept open: a note is one write).
TRACING_HOOKS = '''\
import os
import time

from fetchwork.hooks import reference

TRACE = {trace!r}
_FD = None


def _mark(hop):
    global _FD
    if _FD is None:
        _FD = os.open(TRACE, os.O_WRONLY | os.O_APPEND)
    os.write(_FD, ("%s %d %d\\n" % (hop, time.time_ns(), os.getpid())).encode())


def fetch(args, stdin_text):
    _mark("fetch.called")
    out = reference.fetch_work(args, stdin_text)
    if out:
        _mark("fetch.returned")
    return out


def prepare(args, stdin_text):
    _mark("prepare.called")
    try:
        return reference.prepare_job(args, stdin_text)
    finally:
        _mark("prepare.returned")
'''

# (label, hop) in the order a job meets them; a hop a run never meets is left out.
HOPS = [
    ("submit call", "submit.called"),
    ("stage.lua", "redis.stage"),
    ("submit.lua", "redis.submit"),
    ("submit returned", "submit.returned"),
    ("leader read", "redis.leader_read"),
    ("admit_signed.lua", "redis.admit_signed"),
    ("claim woken", "claim.woken"),
    ("claim_quiet.lua", "redis.claim_quiet"),
    ("fetch hook returned", "fetch.returned"),
    ("startd fetched", "startd.fetched"),
    ("startd handover", "startd.handover"),
    ("sandbox made", "startd.sandbox_made"),
    ("job sent to a starter", "startd.sent"),
    ("starter received", "starter.received"),
    ("starter configured", "starter.configured"),
    ("starter ads read", "starter.ads_read"),
    ("signature checked", "starter.checked"),
    ("starter running", "starter.running"),
    ("prepare hook called", "prepare.called"),
    ("prepare hook returned", "prepare.returned"),
    ("spawn called", "starter.spawning"),
    ("job spawned", "starter.spawned"),
    ("program runs", "program.runs"),
]
WATCHED_SCRIPTS = ("stage", "submit", "admit_signed", "claim_quiet", "claim")
# The script a signing leader's pass reads the waiting set with (its "leader read").
LEADER_READ_SCRIPT = "read_waiting"


class Monitor:
    """Redis MONITOR in a thread: (hop, ns) of each script call this trace watches, and
    of the leader's reads of the waiting set (its script, or a ZRANGE of the set)."""

    def __init__(self, url: str, validating_key: str):
        self.client = redis.Redis.from_url(url)
        self.by_sha = {scripts.sha(name): f"redis.{name}" for name in WATCHED_SCRIPTS}
        if LEADER_READ_SCRIPT in scripts.STANDALONE:
            self.by_sha[scripts.sha(LEADER_READ_SCRIPT)] = "redis.leader_read"
        self.validating_key = validating_key
        self.seen: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        try:
            with self.client.monitor() as monitor:
                self._ready.set()
                for command in monitor.listen():
                    hop = self._hop(command)
                    if hop is not None:
                        with self._lock:
                            self.seen.append((hop, int(round(float(command["time"]) * 1e9))))
        except redis.ConnectionError:
            return  # the pool stopped

    def _hop(self, command: dict[str, Any]) -> str | None:
        words = str(command.get("command", "")).split()
        if len(words) >= 2 and words[0].upper() == "EVALSHA":
            return self.by_sha.get(words[1])
        if len(words) >= 2 and words[0].upper() == "ZRANGE" and words[1] == self.validating_key:
            return "redis.leader_read"
        return None

    def marks(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self.seen)


def script_times(client: redis.Redis, count: int) -> None:
    """Print the median time Redis spent in each watched script and the leader's read
    (SLOWLOG, every command logged since the trace began), in µs."""
    names = WATCHED_SCRIPTS + tuple(name for name in (LEADER_READ_SCRIPT,)
                                    if name in scripts.STANDALONE)
    by_sha = {scripts.sha(name): name for name in names}
    spent: dict[str, list[int]] = {}
    for entry in client.slowlog_get(count):
        words = [word.decode() if isinstance(word, bytes) else str(word)
                 for word in entry.get("command", b"").split()[:2]]
        if len(words) == 2 and words[0].upper() == "EVALSHA" and words[1] in by_sha:
            spent.setdefault(by_sha[words[1]], []).append(int(entry["duration"]))
    print("Redis's own time in each script, median (calls): " + ", ".join(
        f"{name} {statistics.median(values):.0f} µs ({len(values)})"
        for name, values in sorted(spent.items())))


def trace_marks(trace: Path) -> list[tuple[str, int]]:
    """The notes in the trace file: (hop, nanoseconds), in the order written."""
    lines = [line.split() for line in trace.read_text().splitlines()]
    return [(words[0], int(words[1])) for words in lines
            if len(words) == 3 and words[1].isdigit()]


def run_jobs(run: StartdRun, count: int, work: Path, trace: Path,
             monitor: Monitor) -> list[dict[str, int]]:
    """Each job's first time of every hop after its submission."""
    jobs: list[dict[str, int]] = []
    for index in range(count):
        time.sleep(0.25)  # the slots are idle again, waiting for work
        out = work / f"stamp.{index}"
        out.unlink(missing_ok=True)
        before = run.ended()
        called = time.time_ns()
        run.broker.submit([{"Cmd": "/bin/date", "Arguments": "+%s%N", "Iwd": str(work),
                            "Out": out.name}], owner="bench")
        returned = time.time_ns()
        deadline = time.monotonic() + 30
        while run.ended() <= before:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {index} did not end within 30 s")
            time.sleep(0.002)
        hops = {"submit.called": called, "submit.returned": returned,
                "program.runs": int(out.read_text().strip())}
        for hop, ns in sorted(trace_marks(trace) + monitor.marks(), key=lambda mark: mark[1]):
            if ns >= called and hop not in hops:
                hops[hop] = ns
        jobs.append(hops)
    return jobs


def report_each(jobs: list[dict[str, int]]) -> None:
    """Each job's hops, ms since its submit call (a row per job, hops as in the table)."""
    met = [hop for _label, hop in HOPS if any(hop in job for job in jobs)]
    print("each job, ms since its submit call: " + " ".join(met))
    for number, job in enumerate(jobs):
        print(f"{number:4d} " + " ".join(
            f"{(job[hop] - job['submit.called']) / 1e6:8.2f}" if hop in job else f"{'-':>8}"
            for hop in met))


def report(jobs: list[dict[str, int]]) -> None:
    print(f"{'hop':<24} {'after the hop before':>22} {'since submit call':>22}")
    print(f"{'':<24} {'median':>10} {'p99':>10}   {'median':>10} {'p99':>10}   (ms)")
    # In the order the run met them (the leader's read of the waiting set comes
    # before its admission, or after it when the events named the job).
    met = sorted([(label, hop) for label, hop in HOPS if any(hop in job for job in jobs)],
                 key=lambda pair: statistics.median(
                     job[pair[1]] - job["submit.called"] for job in jobs if pair[1] in job))
    previous = None
    for label, hop in met:
        steps = [(job[hop] - job[previous]) / 1e6 for job in jobs
                 if previous is not None and hop in job and previous in job]
        totals = [(job[hop] - job["submit.called"]) / 1e6 for job in jobs if hop in job]
        step = (f"{statistics.median(steps):10.2f} {percentile(steps, 0.99):10.2f}"
                if steps else f"{'':>21}")
        print(f"{label:<24} {step}   {statistics.median(totals):10.2f} "
              f"{percentile(totals, 0.99):10.2f}")
        previous = hop
    fetch = [(job["program.runs"] - job["fetch.returned"]) / 1e6 for job in jobs
             if "fetch.returned" in job]
    submit = [(job["program.runs"] - job["submit.called"]) / 1e6 for job in jobs]
    for name, values in (("fetch-to-start", fetch), ("submit-to-start", submit)):
        if values:
            print(f"{name:<24} median {statistics.median(values):7.2f} ms   "
                  f"p99 {percentile(values, 0.99):7.2f} ms   (n={len(values)})")


def traced_run(prefix: str, slots: int,
               jobs_per_process: int | None) -> tuple[Path, Path, StartdRun]:
    """A bench pool whose processes note their hops in a trace file, with the tracing
    reference hooks (TRACING_HOOKS) as its fetch and prepare hooks: (its folder, the
    trace file, the pool, not yet started)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    trace = root / "trace.log"
    trace.touch()
    trace.chmod(0o666)  # starters may run as another user under a root startd
    os.environ[TRACE_ENV_VAR] = str(trace)
    os.environ["_FETCHWORK_FETCHWORK_HOOK_PREPARE_JOB"] = "python:fwbench_hooks:prepare"
    run = StartdRun(root / "pool", slots, jobs_per_process)
    (run.root / "fwbench_hooks.py").write_text(TRACING_HOOKS.format(trace=str(trace)))
    return root, trace, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="jobs, one at a time")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--jobs-per-process", type=int, default=None,
                        help="STARTER_JOBS_PER_PROCESS (default: the configuration's)")
    parser.add_argument("--each", action="store_true", help="also print each job's hops")
    args = parser.parse_args()
    root, trace, run = traced_run("fw-latency-trace-", args.slots, args.jobs_per_process)
    try:
        run.start()
        monitor = Monitor(run.pool.url, run.broker.keys.validating)
        run.client.config_set("slowlog-max-len", 100_000)
        run.client.config_set("slowlog-log-slower-than", 0)
        work = run.root / "work"
        work.mkdir()
        work.chmod(0o777)  # jobs run as nobody under a root startd
        print(f"{args.jobs} jobs one at a time onto {args.slots} idle slots "
              f"(STARTER_JOBS_PER_PROCESS = {run.jobs_per_process}); {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}")
        run_jobs(run, 1, work, trace, monitor)  # the pool's first job warms it up: not counted
        jobs = run_jobs(run, args.jobs, work, trace, monitor)
        if args.each:
            report_each(jobs)
        report(jobs)
        script_times(run.client, 100_000)
    finally:
        run.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
