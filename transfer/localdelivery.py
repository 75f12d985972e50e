"""Delivery on a pool on one machine: outputs written into each job's `Iwd` as its
job completes, as HTCondor's schedd does, with nothing for the user to run.

`fetchwork up` runs a `LocalDelivery` beside its broker and startd. It follows
the pool's event stream; for a job that completed with outputs waiting, that was
submitted on this machine (its FileSystemDomain is this machine's) and not with
`-spool`, it writes them as the job's Owner: when `up` runs as root through a
short program that becomes the Owner before touching a file
(`python -m fetchwork.transfer.localdelivery JOB --user UID:GID`); otherwise in
this process, and only for jobs of the user running `up` (others wait for
`fetchwork transfer-data`). Every so often it also looks for outputs it may have
missed (a restart) and settles outputs whose time ran out.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import pwd
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from fetchwork.broker.connections.clients import connect
from fetchwork.broker.store import Store
from fetchwork.config.loader import Config, get_config
from fetchwork.config.protocol import job_id_key
from fetchwork.errors import FetchworkError

from . import delivery, stored
from .sandbox import become

log = logging.getLogger(__name__)

# Seconds between looks at every waiting output (missed events, expiry).
SWEEP_S = 30.0
_BLOCK_MS = 1000


def local_job(ad: Mapping[str, Any], domain: str) -> bool:
    """Whether this machine delivers the job's outputs: completed, submitted here,
    not spooled, with outputs named (pure)."""
    return (ad.get("FetchworkState") == "COMPLETED"
            and ad.get(delivery.SPOOL_ATTR) is not True
            and ad.get("FileSystemDomain") == domain
            and delivery.output_manifest(ad) is not None)


def store_from(config: Config) -> Store:
    pool = config.require("FETCHWORK_POOL").strip()
    return Store(connect(config, start=False, pool=pool), pool,
                 config.get_int("BROKER_EVENTS_MAXLEN"))


class LocalDelivery:
    """Delivers the outputs of this machine's completed jobs (a thread of `up`)."""

    def __init__(self, config: Config, domain: str | None = None):
        self.config = config
        self.domain = domain or socket.getfqdn()
        self.me = getpass.getuser()
        self.stopping = threading.Event()
        self._tried: set[str] = set()

    def run(self) -> None:
        """Until `stopping` is set."""
        store: Store | None = None
        position = "$"
        next_sweep = 0.0
        while not self.stopping.is_set():
            try:
                if store is None:
                    store = store_from(self.config)
                    position = store.last_event_id()
                if time.monotonic() >= next_sweep:
                    delivery.expire_due(store)
                    self._deliver(store, stored.waiting_outputs(store))
                    next_sweep = time.monotonic() + SWEEP_S
                events = store.events(position, _BLOCK_MS, 500)
                if events:
                    position = events[-1][0]
                done = {fields.get("job", "") for _id, fields in events
                        if fields.get("state") == "COMPLETED"}
                if done:
                    self._deliver(store, {job: ("", 0.0) for job in done if job})
            except FetchworkError as exc:
                log.warning("output delivery: %s", exc)
                self.stopping.wait(1.0)
            except Exception:  # noqa: BLE001 - a thread that must go on for the pool
                log.exception("output delivery failed; trying again")
                store = None
                self.stopping.wait(1.0)

    def _deliver(self, store: Store, jobs: Mapping[str, object]) -> None:
        for job_id in sorted(jobs, key=job_id_key):
            data = store.hashes([job_id])
            ad = next((fields for _job, fields in data), None)
            if not ad or not local_job(ad, self.domain):
                continue
            if not stored.is_waiting(store, job_id, str(delivery.output_manifest(ad))):
                continue
            self._deliver_one(store, job_id, ad)

    def _deliver_one(self, store: Store, job_id: str, ad: Mapping[str, Any]) -> None:
        owner = ad.get("Owner")
        if os.geteuid() != 0:
            if owner != self.me:
                if job_id not in self._tried:
                    log.info("job %s: outputs wait for %s to run `fetchwork transfer-data`",
                             job_id, owner)
                    self._tried.add(job_id)
                return
            try:
                delivery.deliver(store, job_id, ad)
            except FetchworkError as exc:
                self._failed(job_id, str(exc))
            return
        try:
            entry = pwd.getpwnam(str(owner))
        except KeyError:
            self._failed(job_id, f"its Owner {owner!r} is not a user of this machine")
            return
        if entry.pw_uid == 0:
            self._failed(job_id, "outputs are never written as root")
            return
        argv = [sys.executable, "-P", "-m", __name__, job_id,
                "--user", f"{entry.pw_uid}:{entry.pw_gid}"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
        if done.returncode != 0:
            self._failed(job_id, done.stderr.strip().splitlines()[-1:] and
                         done.stderr.strip().splitlines()[-1] or f"exit {done.returncode}")

    def _failed(self, job_id: str, why: str) -> None:
        if job_id not in self._tried:
            log.warning("job %s: outputs not delivered: %s", job_id, why)
            self._tried.add(job_id)


def main(argv: list[str] | None = None) -> int:
    """Deliver one job's outputs as `--user` (started as root by LocalDelivery)."""
    parser = argparse.ArgumentParser(prog="fetchwork.transfer.localdelivery")
    parser.add_argument("job")
    parser.add_argument("--user")
    args = parser.parse_args(argv)
    store = store_from(get_config())
    store.client.ping()
    store.scripts.ensure_loaded(["transfer_settle"])  # before the switch (see sandbox.py)
    become(args.user)
    data = next((fields for _job, fields in store.hashes([args.job])), None)
    if not data:
        print(f"job {args.job} is not in the pool", file=sys.stderr)
        return 1
    try:
        delivery.deliver(store, args.job, data)
    except FetchworkError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
