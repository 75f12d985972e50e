"""The cost of one policy pass over a big queue (pure code, no Redis).

    python bench/policy_bench.py [--jobs 100000] [--users 1000] [--running 2000]

Builds job ads as the broker stores them (to_dict-style mappings), then times:
the snapshot built from the ads; a pass with every policy knob off; a pass
with the example site's policy (config/examples/hpc2n.conf: limits, MAXPS,
priority weights, fair share over a day of finished jobs); and the
transitions that pass asks for. Prints figures only.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from fetchwork.broker.policy.partition import changes, policy_pass
from fetchwork.broker.policy.settings import policy_settings
from fetchwork.broker.policy.snapshot import Usage, build_snapshot
from fetchwork.config.loader import DEFAULTS_FILE, Config

EXAMPLE = Path(__file__).resolve().parent.parent / "config" / "examples" / "hpc2n.conf"
PROJECTS = ("snac001", "phys", "chem", None, None)


def make_ads(jobs: int, users: int, running: int, now: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    ads = []
    for number in range(jobs):
        state = "RUNNING" if number < running else "IDLE"
        ad = {"ClusterId": number // 100 + 1, "ProcId": number % 100,
              "Owner": f"user{rng.randrange(users)}", "QDate": now - 3600,
              "JobStatus": 2 if state == "RUNNING" else 1, "FetchworkState": state,
              "FetchworkOrder": float(number), "EnteredCurrentStatus": now - rng.randrange(3600),
              "JobPrio": rng.choice((0, 0, 0, 1)), "RequestCpus": rng.choice((1, 1, 2, 8)),
              "AllowedJobDuration": rng.choice((600, 3600, 7200)), "Cmd": "/bin/true"}
        project = rng.choice(PROJECTS)
        if project:
            ad["AccountingGroup"] = project
        ads.append(ad)
    return ads


def timed(label: str, step, repeat: int = 3):
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = step()
        best = min(best, time.perf_counter() - started)
    print(f"{label:<44} {best * 1000:9.1f} ms")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    now = time.time()
    defaults = Path(DEFAULTS_FILE).read_text(encoding="utf-8")
    off = policy_settings(Config.from_text(defaults))
    site = policy_settings(Config.from_text(defaults + EXAMPLE.read_text(encoding="utf-8")))
    ads = make_ads(args.jobs, args.users, args.running, now, args.seed)
    rng = random.Random(args.seed)
    usage = [Usage(f"user{rng.randrange(args.users)}", rng.choice(PROJECTS), 1,
                   now - 86400 + i, now - 86400 + i + 600) for i in range(0, 86400, 10)]
    print(f"{args.jobs} jobs ({args.running} running) of {args.users} users, "
          f"{len(usage)} finished jobs for fair share")
    jobs = timed("snapshot from ads", lambda: build_snapshot(ads, off.default_walltime_s))
    timed("pass, every knob off", lambda: policy_pass(jobs, off, now))
    result = timed("pass, example site (limits + weights)", lambda: policy_pass(jobs, site, now,
                                                                                 usage))
    moves = timed("transitions of that pass", lambda: changes(jobs, result))
    idle = len(result.idle_ids())
    print(f"idle {idle}, blocked {len(result.blocked_ids())}, transitions {len(moves)}")


if __name__ == "__main__":
    main()
