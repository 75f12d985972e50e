"""The chaos run, long form: a pool under random SIGKILLs, then the checks.

    python bench/chaos.py [--jobs 60] [--chaos-s 90] [--kill-every 3 6] [--job-s 2]
                          [--lease-s 6] [--seed N] [--keep]

Two startds (two slots each), a broker pair and a redis-server with AOF on
(`appendfsync always`) run jobs while a random process (startd, starter,
broker leader, Redis) gets SIGKILL every few seconds and is started again
after a moment, as a supervisor would. Then it waits for every job to end and
checks: every job completed exactly once in the queue, no two runs of a job
overlapped while a lease held, no run after a finished one, nothing missing.
Prints jobs, kills, reruns and the worst requeue delay; exits 1 on any
problem. The short form runs in the test suite (tests/pool/test_chaos.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.chaos import ChaosPlan, ChaosPool  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--chaos-s", type=float, default=90.0)
    parser.add_argument("--kill-every", type=float, nargs=2, default=(3.0, 6.0),
                        metavar=("MIN_S", "MAX_S"))
    parser.add_argument("--job-s", type=float, default=2.0)
    parser.add_argument("--lease-s", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the folder and its logs")
    options = parser.parse_args()
    plan = ChaosPlan(jobs=options.jobs, job_s=options.job_s, chaos_s=options.chaos_s,
                     kill_every_s=tuple(options.kill_every), lease_s=options.lease_s,
                     drain_timeout_s=max(120.0, options.jobs * options.job_s),
                     seed=options.seed if options.seed is not None else
                     int.from_bytes(__import__("os").urandom(4), "big"))
    root = Path(tempfile.mkdtemp(prefix="fw-chaos-"))
    root.chmod(0o755)
    print(f"chaos: seed {plan.seed}, folder {root}", flush=True)
    pool = ChaosPool(root, plan)
    try:
        report = pool.run()
    finally:
        pool.close()
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(report.summary())
    for problem in report.problems:
        print(f"  problem: {problem}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
