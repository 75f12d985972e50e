"""The cost of one policy pass over a big queue (pure code, no Redis).

    python bench/scheduling_bench.py [--jobs 100000] [--users 1000] [--running 2000]
                                 [--claims 2000] [--backfill-jobs 10000]

Builds job ads as the broker stores them (to_dict-style mappings), then times:
the snapshot built from the ads; a pass with every policy knob off; a pass
with the example site's policy (config/examples/hpc2n.conf: limits, MAXPS,
priority weights, fair share over a day of finished jobs); and the
transitions that pass asks for. Then, on a private embedded Redis, the
latency of claim() (claim.lua and its PS re-check) with every policy knob
off, beside the example site's policy. Last, the latency of claim() with
--backfill-jobs idle jobs of 100 shapes (1 to 16 CPUs, 5 to 100 minutes)
while the leader's backfill reservation holds a 64-CPU machine for the head
job: the reserved machine's slot, whose claims take only jobs that end
within its 15-minute window (each walks past the jobs that do not); slots of
other machines; and, with BACKFILL = false, slots whose claims find that
every job waits behind the reservation. Prints figures only.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import redis

from fetchwork.broker.backfill.leader import BackfillLeader
from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import EmbeddedRedis
from fetchwork.broker.filters.gate import summary_of
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher
from fetchwork.broker.scheduling.eligibility import changes, scheduling_pass
from fetchwork.broker.scheduling.leaderpass import SchedulingRunner
from fetchwork.broker.scheduling.settings import scheduling_settings
from fetchwork.broker.scheduling.snapshot import Usage, build_snapshot
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
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--backfill-jobs", type=int, default=10_000)
    args = parser.parse_args()
    now = time.time()
    defaults = Path(DEFAULTS_FILE).read_text(encoding="utf-8")
    off = scheduling_settings(Config.from_text(defaults))
    site = scheduling_settings(Config.from_text(defaults + EXAMPLE.read_text(encoding="utf-8")))
    ads = make_ads(args.jobs, args.users, args.running, now, args.seed)
    rng = random.Random(args.seed)
    usage = [Usage(f"user{rng.randrange(args.users)}", rng.choice(PROJECTS), 1,
                   now - 86400 + i, now - 86400 + i + 600) for i in range(0, 86400, 10)]
    print(f"{args.jobs} jobs ({args.running} running) of {args.users} users, "
          f"{len(usage)} finished jobs for fair share")
    jobs = timed("snapshot from ads", lambda: build_snapshot(ads, off.default_walltime_s))
    timed("pass, every knob off", lambda: scheduling_pass(jobs, off, now))
    result = timed("pass, example site (limits + weights)", lambda: scheduling_pass(jobs, site, now,
                                                                                 usage))
    moves = timed("transitions of that pass", lambda: changes(jobs, result))
    idle = len(result.idle_ids())
    print(f"idle {idle}, blocked {len(result.blocked_ids())}, transitions {len(moves)}")
    claim_latency(args.claims)
    backfill_claim_latency(args.backfill_jobs, min(args.claims, 1000))


def published(broker: Broker, config: Config) -> Broker:
    """`broker`, its pool's rules published as its leader would: these pools have no
    broker service, and a pool whose leader never published them keeps every new job
    waiting for it."""
    RulesPublisher.from_config(broker.store, config, summary_of(load_settings(config)),
                               "bench").publish()
    return broker


def claim_latency(claims: int) -> None:
    """Median and p99 of claim() + finish() cycles, policy off and on, 8 jobs per user."""
    state = tempfile.mkdtemp(prefix="fw-policy-bench-")
    server = EmbeddedRedis(state)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        environ = {"FETCHWORK_STATE_DIR": state, "FETCHWORK_BROKER": server.url}
        print(f"claim latency, {claims} claims of 1-CPU jobs, 8 per user:")
        for label, config_file in (("policy off", None), ("example site", str(EXAMPLE))):
            config = Config.load(environ=environ, config_file=config_file)
            broker = published(Broker(client, f"bench-{label.split()[0]}", config), config)
            for first in range(0, claims, 8):
                count = min(8, claims - first)
                broker.submit([{"Cmd": "/bin/true", "AllowedJobDuration": 60}] * count,
                              owner=f"user{first // 8}")
            runner = SchedulingRunner.for_settings(broker.store, broker.scheduling)
            if runner is not None:
                runner.run_pass()
            samples = []
            slot = {"Name": "slot1@bench", "Cpus": 1, "Memory": 1024}
            for _ in range(claims):
                started = time.perf_counter()
                ad = broker.claim(slot)
                samples.append(time.perf_counter() - started)
                assert ad is not None, "every job is idle"
                broker.finish(f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"], "exit")
            samples.sort()
            print(f"  {label:<14} median {statistics.median(samples) * 1000:6.2f} ms   "
                  f"p99 {samples[int(0.99 * (len(samples) - 1))] * 1000:6.2f} ms")
        client.close()
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)


def percentiles(samples: list[float]) -> str:
    samples = sorted(samples)
    return (f"median {statistics.median(samples) * 1000:6.2f} ms   "
            f"p99 {samples[int(0.99 * (len(samples) - 1))] * 1000:6.2f} ms")


def partitionable(machine: str, free_cpus: int, total_cpus: int) -> dict:
    return {"Name": f"slot1@{machine}", "Machine": machine, "Cpus": free_cpus,
            "Memory": 4000 * free_cpus, "TotalSlotCpus": total_cpus,
            "TotalSlotMemory": 4000 * total_cpus, "SlotType": "Partitionable",
            "PartitionableSlot": True}


def backfill_claim_latency(jobs: int, claims: int) -> None:
    """claim() latency with `jobs` idle jobs of 100 shapes and a reservation in place."""
    state = tempfile.mkdtemp(prefix="fw-backfill-bench-")
    server = EmbeddedRedis(state)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        config = Config.load(environ={"FETCHWORK_STATE_DIR": state,
                                      "FETCHWORK_BROKER": server.url})
        broker = published(Broker(client, "bench-backfill", config), config)
        fits = {"$expr": "TARGET.Cpus >= MY.RequestCpus"}
        broker.publish_slot(partitionable("big", 64, 64), 600)
        broker.submit([{"Cmd": "/bin/true", "RequestCpus": 32, "AllowedJobDuration": 900}])
        assert broker.claim(partitionable("big", 64, 64)) is not None
        rng = random.Random(1)
        shapes = [(cpus, minutes * 60) for cpus in (1, 2, 4, 8, 16)
                  for minutes in range(5, 101, 5)]
        ads = [{"Cmd": "/bin/true", "RequestCpus": 64, "AllowedJobDuration": 3600,
                "Requirements": fits}]
        for _ in range(jobs):
            cpus, walltime_s = rng.choice(shapes)
            ads.append({"Cmd": "/bin/true", "RequestCpus": cpus, "AllowedJobDuration": walltime_s,
                        "RequestMemory": 1000 * cpus, "Requirements": fits})
        for first in range(0, len(ads), 1000):
            broker.submit(ads[first:first + 1000])
        others = [partitionable(f"node{number}", 16, 16) for number in range(8)]
        for ad in others:
            broker.publish_slot(ad, 600)
        leader = BackfillLeader.from_config(broker.store, config)
        started = time.perf_counter()
        plan = leader.run_pass()
        print(f"backfill pass over {jobs + 1} idle jobs, 9 machines: "
              f"{(time.perf_counter() - started) * 1000:.1f} ms; reservation for "
              f"{plan.reservation.job_id if plan.reservation else None}")
        print(f"claim latency, {jobs} idle jobs of {len(shapes)} shapes, a reservation in place:")
        strict = Broker(client, "bench-backfill", config.with_values(BACKFILL=False))
        for label, slot, claimer, count in (
                ("reserved machine", "big", broker, claims // 4),
                ("other machines", None, broker, claims),
                ("BACKFILL = false", None, strict, claims // 4)):
            samples = []
            for number in range(count):
                ad = partitionable("big", 32, 64) if slot else others[number % len(others)]
                began = time.perf_counter()
                claimer.claim(ad)
                samples.append(time.perf_counter() - began)
            print(f"  {label:<17} {percentiles(samples)}   ({len(samples)} claims)")
        client.close()
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
