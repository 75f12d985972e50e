"""A slot's cycle, hop by hop: from its job's spawn to its next job's spawn.

    python bench/cycle_trace.py [--jobs 500] [--jobs-per-process N] [--each]

One private pool as `startd_bench.py` runs it (embedded Redis, the broker
service, a startd with the reference `python:` hooks), with one slot, N
`/bin/true` jobs queued at once and FETCHWORK_LATENCY_TRACE set, so the
startd, its starters and the bench's hook module note when they reach each
hop (config/latencytrace.py). One slot, so that each mark belongs to the
one cycle under way; the first 20 cycles (starters still forked, caches
still filling) are not counted. The hops of a cycle, in order:

  job spawned            the starter's spawn call returned
  job exited             the starter's loop saw the job's main process end
  job reaped             its status taken, what it left behind looked for
  measured               the last sample of its CPU and size taken
  exit hook called       the outcome file is written; the exit hook starts
  exit hook returned     it has told the broker (`finish`)
  exited sent            the `exited` event (with the final ad) written
  sandbox removed        the starter removed the job's sandbox
  done sent              a kept starter said `done` on its socket
  startd read exited     the startd's loop read the `exited` event
  startd reaped          the startd's loop took the starter's `done` (or exit)
  fetch started          the slot's next fetch hook started
  fetch called           the in-process fetch hook begins (its thread)
  fetch returned         it hands the next job out (its claim done)
  startd fetched         the startd's loop has the hook's result
  startd handover        the startd hands the job to the starter
  starter received       the starter has it
  prepare hook called    the in-process prepare hook starts
  next job spawned       the next job's spawn call returned

It prints each hop's median and p99 time after the one before it (in the
order of their medians: the startd may fetch while the starter ends), the whole
cycle's median, and the jobs a second the median cycle allows. Prints
figures only; the pool's logs go to a file in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:  # run as a script: bench/ is not a package then
    sys.path.insert(0, str(BENCH_DIR.parent))
from bench.latency_trace import trace_marks, traced_run  # noqa: E402
from bench.startd_bench import percentile, rate_between_ends  # noqa: E402

WARM_CYCLES = 20

# (label, hop), in the order a cycle meets them.
HOPS = [
    ("job spawned", "starter.spawned"),
    ("job exited", "starter.job_exited"),
    ("job reaped", "starter.reaped"),
    ("measured", "starter.measured"),
    ("exit hook called", "starter.exit_hook_called"),
    ("exit hook returned", "starter.exit_hook_returned"),
    ("exited sent", "starter.exited_sent"),
    ("sandbox removed", "starter.sandbox_removed"),
    ("done sent", "starter.done_sent"),
    ("startd read exited", "startd.exited_read"),
    ("startd reaped", "startd.reaped"),
    ("fetch started", "startd.fetch_started"),
    ("fetch called", "fetch.called"),
    ("fetch returned", "fetch.returned"),
    ("startd fetched", "startd.fetched"),
    ("startd handover", "startd.handover"),
    ("starter received", "starter.received"),
    ("prepare hook called", "prepare.called"),
    ("prepare hook returned", "prepare.returned"),
    ("next job spawned", "next.spawned"),
]


def cycles(trace: Path) -> list[dict[str, int]]:
    """Each cycle's first time of every hop, from one spawn to the next."""
    marks = sorted(trace_marks(trace), key=lambda mark: mark[1])
    found: list[dict[str, int]] = []
    current: dict[str, int] | None = None
    for hop, ns in marks:
        if hop == "starter.spawned":
            if current is not None:
                current["next.spawned"] = ns
                found.append(current)
            current = {hop: ns}
        elif current is not None and hop not in current:
            current[hop] = ns
    return found[WARM_CYCLES:]


def report(found: list[dict[str, int]]) -> None:
    print(f"{'hop':<22} {'after the hop before':>22} {'since the spawn':>22}")
    print(f"{'':<22} {'median':>10} {'p99':>10}   {'median':>10} {'p99':>10}   (ms)")
    previous = None
    # In the order the run met them (the startd may fetch while the starter ends).
    met = sorted([(label, hop) for label, hop in HOPS if any(hop in cycle for cycle in found)],
                 key=lambda pair: statistics.median(
                     cycle[pair[1]] - cycle["starter.spawned"] for cycle in found
                     if pair[1] in cycle))
    for label, hop in met:
        steps = [(cycle[hop] - cycle[previous]) / 1e6 for cycle in found
                 if previous is not None and hop in cycle and previous in cycle]
        totals = [(cycle[hop] - cycle["starter.spawned"]) / 1e6 for cycle in found
                  if hop in cycle]
        step = (f"{statistics.median(steps):10.2f} {percentile(steps, 0.99):10.2f}"
                if steps else f"{'':>21}")
        print(f"{label:<22} {step}   {statistics.median(totals):10.2f} "
              f"{percentile(totals, 0.99):10.2f}")
        previous = hop
    whole = [(cycle["next.spawned"] - cycle["starter.spawned"]) / 1e6 for cycle in found]
    median = statistics.median(whole)
    print(f"a cycle: median {median:.2f} ms, p99 {percentile(whole, 0.99):.2f} ms "
          f"(n={len(whole)}): {1000 / median:.0f} jobs/s a slot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500, help="jobs queued at once")
    parser.add_argument("--jobs-per-process", type=int, default=None,
                        help="STARTER_JOBS_PER_PROCESS (default: the configuration's)")
    parser.add_argument("--each", action="store_true", help="also print each cycle's hops")
    args = parser.parse_args()
    root, trace, run = traced_run("fw-cycle-trace-", 1, args.jobs_per_process)
    try:
        run.start()
        before = run.ended()
        run.broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * args.jobs, owner="bench")
        rate = rate_between_ends(lambda: run.ended() - before, args.jobs)
        time.sleep(0.5)  # the last cycle's marks
        print(f"{args.jobs} /bin/true jobs on one slot (STARTER_JOBS_PER_PROCESS = "
              f"{run.jobs_per_process}): {rate:.1f} jobs/s; {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}")
        found = cycles(trace)
        if args.each:
            print(" ".join(hop for _label, hop in HOPS))
            for cycle in found:
                print(" ".join(f"{(cycle[hop] - cycle['starter.spawned']) / 1e6:7.2f}"
                               if hop in cycle else f"{'-':>7}" for _label, hop in HOPS))
        report(found)
    finally:
        run.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
