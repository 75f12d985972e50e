"""Fetch-to-start latency and trivial-job throughput of one 2-slot startd.

    python bench/startd_bench.py [--jobs 100] [--latency-jobs 30] [--slots 2]

Both hook forms are measured with the same fetch hook behaviour (hand out
the next job file of a folder, nothing once it is empty): a `/bin/sh`
program, and an in-process `python:` function. No other hook is configured,
so the figures are the startd and starter's own cost.

- throughput: N `/bin/true` jobs queued before the startd starts with
  `--once`; jobs/s from the startd's start to its exit (so it includes start
  up and the final empty fetch of each slot);
- latency: M jobs `/bin/date +%s%N` writing their start time to a file;
  latency = that time minus the moment the fetch hook handed the job out;
  median and p95;
- reference: fork+exec+wait of `/bin/true` alone, from Python, N times.

Runs in a temporary folder (removed afterwards); prints one line per figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

FETCH_PROGRAM = """\
#!/bin/sh
for job in JOBS/*; do
  [ -e "$job" ] || exit 0
  case "$job" in *.taken|*.fetched) continue ;; esac
  if mv "$job" "$job.taken" 2>/dev/null; then
    date +%s%N > "$job.fetched"
    cat "$job.taken"
    exit 0
  fi
done
"""

FETCH_MODULE = '''\
import os
import time

JOBS = {jobs!r}


def fetch(args, stdin_text):
    for name in sorted(os.listdir(JOBS)):
        if name.endswith((".taken", ".fetched")):
            continue
        job = os.path.join(JOBS, name)
        try:
            os.rename(job, job + ".taken")
        except OSError:
            continue
        with open(job + ".fetched", "w") as handle:
            handle.write("%d\\n" % time.time_ns())
        with open(job + ".taken") as handle:
            return handle.read()
    return None
'''


class Bench:
    """One startd run in `root` with hooks of one form ("program" or "python")."""

    def __init__(self, root: Path, form: str, slots: int):
        self.root, self.form, self.slots = root, form, slots
        self.jobs = root / "jobs"
        self.out = root / "out"
        for path in (self.jobs, self.out, root / "hooks"):
            path.mkdir(parents=True)
        # The starter runs jobs as nobody when it is root: they must write here.
        self.out.chmod(0o777)
        (root / "benchhooks.py").write_text(FETCH_MODULE.format(jobs=str(self.jobs)))
        program = root / "hooks" / "fetch"
        program.write_text(FETCH_PROGRAM.replace("JOBS", str(self.jobs)))
        program.chmod(0o755)
        fetch = str(program) if form == "program" else "python:benchhooks:fetch"
        (root / "fetchwork.conf").write_text(textwrap.dedent(f"""\
            FETCHWORK_STATE_DIR = {root / 'state'}
            LOG = {root / 'log'}
            EXECUTE = {root / 'execute'}
            NUM_SLOTS = {slots}
            STARTD_JOB_HOOK_KEYWORD = BENCH
            BENCH_HOOK_FETCH_WORK = {fetch}
            FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Busy", 300, 0)
            FETCH_WORK_MIN_INTERVAL = 0.05
            STARTER_INITIAL_UPDATE_INTERVAL = 3600
        """))

    def queue(self, count: int, cmd: str, args: str = "", out: bool = False) -> None:
        for number in range(count):
            lines = [f'Cmd = "{cmd}"', f"ClusterId = {number + 1}", "ProcId = 0", 'Iwd = "/tmp"']
            if args:
                lines.append(f'Arguments = "{args}"')
            if out:
                lines.append(f'Out = "{self.out / f"{number:06d}"}"')
            (self.jobs / f"{number:06d}").write_text("\n".join(lines) + "\n")

    def run_startd(self) -> float:
        env = dict(os.environ)
        env["FETCHWORK_CONFIG"] = str(self.root / "fetchwork.conf")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root),
                                                          env.get("PYTHONPATH")]))
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fetchwork.startd", "--once"], env=env,
                       check=True, stderr=subprocess.DEVNULL, timeout=3600)
        return time.perf_counter() - started

    def latencies_ms(self) -> list[float]:
        found = []
        for path in sorted(self.out.iterdir()):
            fetched = self.jobs / f"{path.name}.fetched"
            text = path.read_text().strip()
            if text and fetched.exists():
                found.append((int(text) - int(fetched.read_text().strip())) / 1e6)
        return found


def fork_exec_ms(count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        subprocess.run(["/bin/true"], check=True)
    return (time.perf_counter() - started) / count * 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(form: str, jobs: int, latency_jobs: int, slots: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="fw-startd-bench-"))
    base.chmod(0o755)
    try:
        throughput = Bench(base / "throughput", form, slots)
        throughput.queue(jobs, "/bin/true")
        elapsed_s = throughput.run_startd()
        print(f"{form:>8} hooks: {jobs / elapsed_s:7.1f} /bin/true jobs/s "
              f"({jobs} jobs, {slots} slots, {elapsed_s:.2f} s)")
        latency = Bench(base / "latency", form, slots)
        latency.queue(latency_jobs, "/bin/date", "+%s%N", out=True)
        latency.run_startd()
        values = latency.latencies_ms()
        if values:
            print(f"{form:>8} hooks: fetch-to-start latency median "
                  f"{statistics.median(values):6.1f} ms, p95 {percentile(values, 0.95):6.1f} ms "
                  f"({len(values)} jobs)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs for the throughput run")
    parser.add_argument("--latency-jobs", type=int, default=30, help="jobs for the latency run")
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args()
    per_exec_ms = fork_exec_ms(args.jobs)
    print(f"reference: fork+exec+wait of /bin/true {per_exec_ms:.2f} ms "
          f"({1000 / per_exec_ms:.0f}/s on one core)")
    for form in ("program", "python"):
        measure(form, args.jobs, args.latency_jobs, args.slots)


if __name__ == "__main__":
    main()
