"""What job signing costs: the broker's batch signature at admission, the startd's check.

    python bench/signing_bench.py [--jobs 20000] [--admit 100000] [--batch 474]
                                  [--redis-cost 20000]

- sign: CPU time per job of the leader's signing, batches of --batch jobs
  (each job's signed text and leaf, the hash tree, one Ed25519 signature a
  batch, the batch's string the pool stores once: `Signer.sign_batch`);
- check: CPU time per job of `signedjob.check` on the ad as a starter reads
  it (the job's text and leaf, its proof path; one Ed25519 verification a
  batch, the roots verified being kept), and the same for a starter that
  has seen no job of the batch before (one verification a job: the most a
  check costs);
- Redis's work: --redis-cost signed jobs submitted, then admitted by a leader
  in this process, each apart: Redis's CPU a job (`INFO cpu`), the bytes its
  append-only file grew a job (`INFO persistence`), and the commands a job
  (`INFO commandstats`: calls and µs, the commands scripts run included);
- admit: --admit signed jobs through the leader on a private embedded Redis:
  submitted in clusters of 1000 while a broker service's leader (another
  process, as in a pool) checks, signs and admits them, from the first
  submit to the last job IDLE; then the leader's admission alone (the jobs
  submitted first, the leader started after).

CPU time is `time.process_time` of this process; the machine may be shared.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import embedded_for
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher, pool_rules
from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, from_dict, parse_ad
from fetchwork.config.loader import Config

CLUSTER = 1000


def typical_job(n: int) -> dict[str, object]:
    return {"GlobalJobId": f"bench#{n // 100}.{n % 100}#1795800000", "ClusterId": n // 100,
            "ProcId": n % 100, "Owner": "alice", "Cmd": "/home/alice/bin/analyse",
            "Arguments": f"--input data/part-{n:05d}.csv --threads 4 --seed {n}",
            "Environment": "OMP_NUM_THREADS=4 LANG=C.UTF-8 PATH=/usr/bin:/bin",
            "Iwd": "/home/alice/run", "Out": f"out.{n}", "Err": f"err.{n}",
            "TransferInput": "data/common.tar.gz", "JobUniverse": 5, "RequestMemory": 2048,
            "RequestCpus": 4, "JobPrio": 0, "Requirements": {"$expr": "Memory >= 2048"}}


def cpu_us(count: int, body: Any) -> float:
    """CPU time of `body()` per job (µs)."""
    start = time.process_time()
    body()
    return (time.process_time() - start) / count * 1e6


def signing_cpu(jobs: int, batch: int, pool: str = "bench") -> tuple[float, float, float]:
    """(sign, check, check with no root kept) CPU µs per job, printed."""
    folder = Path(tempfile.mkdtemp(prefix="fw-signing-cpu-"))
    try:
        ensure_key_pair(folder / "key.pem", folder / "pub.pem")
        signer = Signer((folder / "key.pem").read_bytes(), "key.pem", pool)
        public = signedjob.read_public_key((folder / "pub.pem").read_bytes(), "pub.pem")
        data = [typical_job(n) for n in range(jobs)]
        batches: list[signedjob.SignedBatch] = []

        def sign_all() -> None:
            for start in range(0, jobs, batch):
                leaves = [signedjob.leaf_digest(signedjob.signed_text_of(job))
                          for job in data[start:start + batch]]
                batches.append(signer.sign_batch(leaves))

        sign_us = cpu_us(jobs, sign_all)
        # The leader's way for the jobs of one cluster (typical_job's own values: id,
        # arguments, output files): the shared part of the text written once a cluster.
        own = ("ProcId", "GlobalJobId", "ClusterId", "Arguments", "Out", "Err")
        shared_batches: list[signedjob.SignedBatch] = []

        def sign_shared() -> None:
            texts: dict[object, signedjob.SharedTexts] = {}
            for start in range(0, jobs, batch):
                leaves = []
                for job in data[start:start + batch]:
                    shared = texts.get(job["ClusterId"])
                    if shared is None:
                        shared = texts[job["ClusterId"]] = signedjob.SharedTexts()
                    leaves.append(signedjob.leaf_digest(shared.text(job, own)))
                shared_batches.append(signer.sign_batch(leaves))

        shared_us = cpu_us(jobs, sign_shared)
        # Each job's signature as its claim hands it out (rebuilt from its batch).
        signatures = [signedjob.proof_text(signed.blob, index) or ""
                      for signed in batches for index in range(signed.count)]
        ads = [parse_ad(format_ad(from_dict({**job, signedjob.SIGNATURE_ATTR: signature})))
               for job, signature in zip(data, signatures, strict=True)]
        roots = signedjob.RootCache()
        check_us = cpu_us(jobs, lambda: [signedjob.check(public, ad, pool, roots) for ad in ads])
        sample = ads[: max(1, jobs // 10)]
        cold_us = cpu_us(len(sample), lambda: [signedjob.check(public, ad, pool, None)
                                               for ad in sample])
        assert all(signedjob.check(public, ad, pool, None) is None for ad in ads[:3])
        print(f"{jobs} jobs, {len(signedjob.SIGNED_ATTRIBUTES)} signed attributes, "
              f"batches of {batch}")
        print(f"  {'sign (each job its whole text)':<48} {sign_us:8.1f} us CPU per job")
        print(f"  {'sign (leader, a cluster shares its text)':<48} {shared_us:8.1f} us CPU "
              f"per job")
        print(f"  {'check (starter, the batch root kept)':<48} {check_us:8.1f} us CPU per job")
        print(f"  {'check (starter, a root it has not seen)':<48} {cold_us:8.1f} us CPU per job")
        print(f"  {'sign + check':<48} {sign_us + check_us:8.1f} us CPU per job "
              f"({sign_us + cold_us:.1f} with no root kept; target < 1000)")
        return sign_us, check_us, cold_us
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _lead(env: dict[str, str], key: str, stop: Any, cpu_s: Any, rss_mb: Any) -> None:
    """A broker service's admission, in its own process, until `stop` is set; its CPU
    time goes to `cpu_s`, its resident memory then to `rss_mb`."""
    config = Config.load(environ=env)
    broker = Broker.from_config(config, start=False)
    signer = Signer(Path(key).read_bytes(), key, broker.pool)
    leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                          signer=signer)
    while not stop.is_set():
        leader.run_pass()
        if not broker.client.zcard(broker.keys.validating):
            time.sleep(0.01)
    leader.close()
    cpu_s.value = time.process_time()
    rss_mb.value = psutil.Process().memory_info().rss / 2**20


def admit_signed(broker: Broker, env: dict[str, str], key: str, jobs: int,
                 ad: dict[str, Any]) -> tuple[float, float]:
    """(s from the first submit to the last job admitted with the leader running beside,
    s of the leader's admission alone), printed; `jobs` each time, to `broker`'s pool
    (whose rules must say that every job waits for the leader)."""
    context = multiprocessing.get_context("spawn")

    # (s since the first submit, jobs admitted) after each cluster submitted, the leader
    # beside: whether the leader admits while the client still submits.
    progress: list[tuple[float, int]] = []

    def submit_all(watch: bool = False) -> None:
        for start in range(0, jobs, CLUSTER):
            broker.submit([ad] * min(CLUSTER, jobs - start), owner="bench")
            if watch:
                progress.append((time.perf_counter(),
                                 int(broker.client.zcard(broker.keys.queue))))

    def admitted_all(target: int) -> None:
        while int(broker.client.zcard(broker.keys.validating)) or \
                int(broker.client.zcard(broker.keys.queue)) < target:
            time.sleep(0.005)

    def redis_cpu_s() -> float:
        info = broker.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    results, cpus, rss = [], [], []
    for together in (True, False):
        stop = context.Event()
        leader_cpu, leader_rss = context.Value("d", 0.0), context.Value("d", 0.0)
        leader = context.Process(target=_lead, args=(env, key, stop, leader_cpu, leader_rss))
        before = int(broker.client.zcard(broker.keys.queue))
        if together:
            leader.start()
            time.sleep(1.0)  # the leader's process is up (spawned interpreter)
            started = time.perf_counter()
            submit_all(watch=True)
            progress[:] = [(at - started, count - before) for at, count in progress]
        else:
            submit_all()
            leader.start()
            time.sleep(1.0)
            # The leader's first pass began during the pause: time from the submit's end
            # would count the interpreter's start; count from the first admission on.
            while int(broker.client.zcard(broker.keys.validating)) == jobs:
                time.sleep(0.001)
            started = time.perf_counter()
        redis_before = redis_cpu_s()
        admitted_all(before + jobs)
        spent = time.perf_counter() - started
        redis_s = redis_cpu_s() - redis_before
        stop.set()
        leader.join(30)
        results.append(spent)
        cpus.append((float(leader_cpu.value), redis_s))
        rss.append(float(leader_rss.value))
    together_s, alone_s = results
    print(f"  {jobs} signed jobs submitted and admitted, leader beside   {together_s:6.2f} s  "
          f"{jobs / together_s:8.0f} jobs/s (target < 5 s)")
    print(f"  {jobs} signed jobs, the leader's admission alone            {alone_s:6.2f} s  "
          f"{jobs / alone_s:8.0f} jobs/s")
    first = next((at for at, count in progress if count), None)
    submitted_s, admitted = progress[-1] if progress else (0.0, 0)
    print(f"    leader beside: jobs first seen admitted "
          f"{'after the last submit' if first is None else f'{first:.2f} s'} after the "
          f"first submit; the submission ended at {submitted_s:.2f} s with {admitted} of "
          f"{jobs} admitted")
    leader_s, redis_s = cpus[1]
    print(f"    CPU of that admission: the leader's process {leader_s:.2f} s (its start "
          f"included), Redis {redis_s:.2f} s; the leader's process's RSS after it "
          f"{rss[1]:.1f} MB ({rss[0]:.1f} MB after the leader-beside run)")
    return together_s, alone_s


@contextlib.contextmanager
def signing_pool(state: Path, prefix: str
                 ) -> Iterator[tuple[dict[str, str], Broker, FilterLeader]]:
    """A private embedded Redis in `state` with the pool's rules published and a
    signing leader in this process: the environment, a broker and the leader."""
    env = {**os.environ, "FETCHWORK_STATE_DIR": str(state), "FETCHWORK_CONFIG": os.devnull,
           "FETCHWORK_POOL": f"{prefix}{int(time.time() * 1000) % 100000}"}
    ensure_key_pair(state / "key.pem", state / "pub.pem")
    config = Config.load(environ=env)
    server = embedded_for(config)
    server.start()
    try:
        broker = Broker.from_config(config)
        signer = Signer((state / "key.pem").read_bytes(), "key.pem", broker.pool)
        leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                              signer=signer)
        summary = leader.summary()
        RulesPublisher(broker.store, pool_rules(config, summary), summary, "bench").publish()
        try:
            yield env, broker, leader
        finally:
            leader.close()
    finally:
        server.stop()


def admit_rate(jobs: int, state: Path) -> None:
    with signing_pool(state, "bench") as (env, broker, _):
        print("admission through the leader (private embedded Redis):")
        admit_signed(broker, env, str(state / "key.pem"), jobs,
                     {"Cmd": "/bin/true", "Arguments": "x", "Iwd": "/tmp"})


def _commands(client: Any) -> dict[str, tuple[int, int]]:
    """Redis's calls and µs by command (`INFO commandstats`: those run by scripts too)."""
    return {name.removeprefix("cmdstat_"): (int(row["calls"]), int(row["usec"]))
            for name, row in client.info("commandstats").items()}


def _redis_cpu_s(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _aof_bytes(client: Any) -> int:
    return int(client.info("persistence").get("aof_current_size", 0))


def _cost_line(label: str, client: Any, before: tuple[dict[str, tuple[int, int]], float, int],
               jobs: int) -> None:
    """Print what Redis spent a job since `before` (commands, CPU, AOF bytes)."""
    commands, cpu_s, aof = before
    now = _commands(client)
    rows = sorted(((usec - commands.get(name, (0, 0))[1], name,
                    calls - commands.get(name, (0, 0))[0])
                   for name, (calls, usec) in now.items()), reverse=True)
    shown = ", ".join(f"{name} {calls / jobs:.3g}/{usec / jobs:.1f}"
                      for usec, name, calls in rows[:8] if calls and usec / jobs >= 0.1)
    print(f"  {label:<12} Redis CPU {(_redis_cpu_s(client) - cpu_s) / jobs * 1e6:5.1f} us a job, "
          f"AOF {(_aof_bytes(client) - aof) / jobs:4.0f} bytes a job")
    print(f"    commands a job (calls/us, scripts' own commands included): {shown}")


def redis_cost(jobs: int, state: Path) -> None:
    """Redis's CPU, commands and AOF bytes a job, for the signed submission of `jobs`
    jobs (clusters of CLUSTER) and for their admission by a leader in this process,
    apart, on a private embedded Redis; printed."""
    with signing_pool(state, "cost") as (_, broker, leader):
        client = broker.client
        ad = {"Cmd": "/bin/true", "Arguments": "x", "Iwd": "/tmp"}
        print(f"Redis's work a job, {jobs} signed jobs (private embedded Redis, "
              f"append-only file on):")
        client.config_resetstat()
        before = (_commands(client), _redis_cpu_s(client), _aof_bytes(client))
        for start in range(0, jobs, CLUSTER):
            broker.submit([ad] * min(CLUSTER, jobs - start), owner="bench")
        _cost_line("submission", client, before, jobs)
        before = (_commands(client), _redis_cpu_s(client), _aof_bytes(client))
        started = time.process_time()
        while client.zcard(broker.keys.validating):
            leader.run_pass()
        leader_us = (time.process_time() - started) / jobs * 1e6
        _cost_line("admission", client, before, jobs)
        print(f"    the leader's CPU (this process, its reads' thread included): "
              f"{leader_us:.1f} us a job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--admit", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=474)
    parser.add_argument("--redis-cost", type=int, default=20_000, metavar="JOBS",
                        help="jobs whose submission and admission Redis's work is "
                             "counted apart (0: none)")
    args = parser.parse_args()
    signing_cpu(args.jobs, args.batch)
    for jobs, run, prefix in ((args.redis_cost, redis_cost, "fw-signing-cost-"),
                              (args.admit, admit_rate, "fw-signing-bench-")):
        if jobs:
            with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as folder:
                run(jobs, Path(folder))


if __name__ == "__main__":
    main()
