"""What job signing costs: the broker's signature at admission, the startd's check.

    python bench/signing_bench.py [--jobs 20000] [--admit 5000]

- sign: CPU time per job of `Signer.signature` over a typical stored job (the
  leader's share: the ClassAd text of the signed attributes, one Ed25519
  signature);
- check: CPU time per job of `signedjob.check` on the ad as a starter reads it
  (the startd's share: the same text again, one Ed25519 verification);
- admit: jobs/s from submit to IDLE through the leader's admission, on a
  private embedded Redis: signed in batches (a pool that signs and has no
  submission filter), beside the one-job-at-a-time path a submission
  filter takes (here with no filter to run and no signature).

CPU time is `time.process_time` of this process; the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import embedded_for
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher, pool_rules
from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, from_dict, parse_ad
from fetchwork.config.loader import Config


def typical_job(n: int) -> dict[str, object]:
    return {"GlobalJobId": f"bench#{n // 100}.{n % 100}#1795800000", "ClusterId": n // 100,
            "ProcId": n % 100, "Owner": "alice", "Cmd": "/home/alice/bin/analyse",
            "Arguments": f"--input data/part-{n:05d}.csv --threads 4 --seed {n}",
            "Environment": "OMP_NUM_THREADS=4 LANG=C.UTF-8 PATH=/usr/bin:/bin",
            "Iwd": "/home/alice/run", "Out": f"out.{n}", "Err": f"err.{n}",
            "TransferInput": "data/common.tar.gz", "JobUniverse": 5, "RequestMemory": 2048,
            "RequestCpus": 4, "JobPrio": 0, "Requirements": {"$expr": "Memory >= 2048"}}


def per_job_us(label: str, count: int, body: object) -> float:
    start = time.process_time()
    body()  # type: ignore[operator]
    spent = (time.process_time() - start) / count * 1e6
    print(f"{label:<44} {spent:8.1f} us CPU per job")
    return spent


def admit_rate(signer: Signer | None, jobs: int, state: Path) -> float:
    env = {**os.environ, "FETCHWORK_STATE_DIR": str(state), "FETCHWORK_CONFIG": os.devnull,
           "FETCHWORK_POOL": f"bench{int(time.time() * 1000) % 100000}"}
    config = Config.load(environ=env)
    server = embedded_for(config)
    server.start()
    try:
        broker = Broker.from_config(config)
        leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                              sign=signer.signature if signer else None)
        # The pool's rules as the leader publishes them; without a signer and a filter
        # nothing would wait: ask for admission as a filter would.
        summary = replace(leader.summary(), submit=True)
        RulesPublisher(broker.store, pool_rules(config, summary), summary, "bench").publish()
        ads = [{"Cmd": "/bin/true", "Arguments": f"{n}", "Iwd": "/tmp"} for n in range(jobs)]
        start = time.perf_counter()
        ids = broker.submit(ads, owner="alice")
        while broker.client.zcard(broker.keys.validating):
            for work in leader.run_pass():
                work.result()
        spent = time.perf_counter() - start
        leader.close()
        assert broker.get(ids[-1])["FetchworkState"] == "IDLE"
        rate = jobs / spent
        how = ("signed, in batches" if signer
               else "one by one (the filters' path, unsigned)")
        print(f"submit and admit {jobs} jobs, {how:<42} {spent:6.2f} s  {rate:8.0f} jobs/s")
        return rate
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--admit", type=int, default=5_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fw-signing-bench-"))
    try:
        ensure_key_pair(folder / "key.pem", folder / "pub.pem")
        signer = Signer((folder / "key.pem").read_bytes(), "key.pem")
        public = signedjob.read_public_key((folder / "pub.pem").read_bytes(), "pub.pem")
        jobs = [typical_job(n) for n in range(args.jobs)]
        signed = [{**job, signedjob.SIGNATURE_ATTR: signer.signature(job)} for job in jobs]
        ads = [parse_ad(format_ad(from_dict(job))) for job in signed]
        print(f"{args.jobs} jobs, {len(signedjob.SIGNED_ATTRIBUTES)} signed attributes")
        sign_us = per_job_us("sign (leader, at admission)", args.jobs,
                             lambda: [signer.signature(job) for job in jobs])
        check_us = per_job_us("check (starter, before the job starts)", args.jobs,
                              lambda: [signedjob.check(public, ad) for ad in ads])
        print(f"{'sign + check':<44} {sign_us + check_us:8.1f} us CPU per job")
        if args.admit:
            admit_rate(None, args.admit, folder / "unsigned")
            admit_rate(signer, args.admit, folder / "signed")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
