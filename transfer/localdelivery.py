"""Delivery on a pool on one machine: outputs written into each job's `Iwd` as its
job completes, as HTCondor's schedd does, with nothing for the user to run.

`fetchwork up` runs a `LocalDelivery` beside its broker and startd. It follows
the pool's event stream; for a job that completed with outputs waiting, that was
submitted on this machine (its FileSystemDomain is this machine's) and not with
`-spool`, it writes them as the job's Owner: when `up` runs as root, from its own
thread, which takes the Owner's rights (its uid as effective uid, its gid as its
only group; never root) while it writes a job's files and root's back for the
pool's bookkeeping (privstate.py); otherwise in this process, and only for jobs
of the user running `up` (others wait for `fetchwork transfer-data`).
Completions are gathered for a quarter of a second, so that one pass reads many
jobs' ads at once. The stream is read at most ten times a second while events
come (a read that finds a backlog is followed at once): a blocking read returns
at every new event, and a read for each would cost this thread about half a
millisecond of CPU a job on a busy pool, more than the broker spends on it.
Every so often it also looks for outputs it may have missed (a restart) and
settles outputs whose time ran out.

Why in the thread rather than in a child forked per Owner (as before, and still
where the change of ids cannot be made for the calling thread alone): the fork
cost the `up` process a child's page copies and a new connection to the pool for
every burst of completions, more CPU than the writing of small outputs. The
thread's change of ids is its own (the kernel's calls, not glibc's, which would
change `up`'s other threads too); every folder is still opened without following
a link and every file made under a temporary name as the Owner, so the files have
exactly the Owner's rights, and the Owner can neither signal nor trace `up`
(its real and saved uid stay root's, and the kernel marks it not dumpable).
"""

from __future__ import annotations

import gc
import getpass
import json
import logging
import os
import pwd
import select
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from fetchwork.broker.connections.clients import connect
from fetchwork.broker.store import Store, eventbatch
from fetchwork.config.loader import Config
from fetchwork.config.protocol import job_id_key
from fetchwork.errors import FetchworkError

from . import delivery, privstate, stored
from .sandbox import become

log = logging.getLogger(__name__)

# Seconds between looks at every waiting output (missed events, expiry).
SWEEP_S = 30.0
_BLOCK_MS = 1000
# Completions are gathered this long (or to this many jobs) before they are
# delivered, so that under root one child writes the outputs of many of an Owner's
# jobs: a fork per job would cost more CPU than the writing of small outputs.
GATHER_S = 0.25
GATHER_JOBS = 200
# The least time between two reads of the event stream that found events (a
# read that fills READ_COUNT is followed at once: a backlog is read through).
READ_PACE_S = 0.1
READ_COUNT = 500
# The longest a delivery child may take before it is killed (its outputs then wait
# for the next sweep).
DELIVERY_TIMEOUT_S = 600.0


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
        gathered: set[str] = set()  # completed jobs whose delivery waits for others
        deliver_at = 0.0
        while not self.stopping.is_set():
            try:
                if store is None:
                    store = store_from(self.config)
                    position = store.last_event_id()
                if time.monotonic() >= next_sweep:
                    delivery.expire_due(store)
                    self._deliver(store, stored.waiting_outputs(store))
                    next_sweep = time.monotonic() + SWEEP_S
                wait_ms = (_BLOCK_MS if not gathered else
                           max(1, int((deliver_at - time.monotonic()) * 1000)))
                read_at = time.monotonic()
                entries = store.event_entries(position, wait_ms, READ_COUNT)
                if entries:
                    position = entries[-1][0]
                events = eventbatch.expand_all(entries)
                done = {fields.get("job", "") for _id, fields in events
                        if fields.get("state") == "COMPLETED"} - {""}
                if done and not gathered:
                    deliver_at = time.monotonic() + GATHER_S
                gathered |= done
                if gathered and (time.monotonic() >= deliver_at
                                 or len(gathered) >= GATHER_JOBS):
                    jobs, gathered = gathered, set()
                    self._deliver(store, dict.fromkeys(jobs, ("", 0.0)))
                if entries and len(entries) < READ_COUNT:
                    # Let the next events gather rather than wake for each of them
                    # (not past the gathered jobs' delivery).
                    until = read_at + READ_PACE_S
                    if gathered:
                        until = min(until, deliver_at)
                    self.stopping.wait(until - time.monotonic())
            except FetchworkError as exc:
                log.warning("output delivery: %s", exc)
                self.stopping.wait(1.0)
            except Exception:  # noqa: BLE001 - a thread that must go on for the pool
                log.exception("output delivery failed; trying again")
                store = None
                self.stopping.wait(1.0)

    def _deliver(self, store: Store, jobs: Mapping[str, object]) -> None:
        """Deliver the waiting outputs of `jobs` (those this machine delivers); under root
        the jobs of one Owner together (from this thread, or one child)."""
        by_owner: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        # delivery.deliver looks whether a job's outputs still wait (with the read of
        # their manifest); a look here first only spares a fork, or a log line about
        # another user's outputs.
        root = os.geteuid() == 0
        fork = root and not privstate.per_thread()
        for job_id, ad in store.hashes(sorted(jobs, key=job_id_key)):
            if not local_job(ad, self.domain):
                continue
            look = fork or (not root and str(ad.get("Owner")) != self.me)
            if look and not stored.is_waiting(store, job_id,
                                              str(delivery.output_manifest(ad))):
                continue
            by_owner.setdefault(str(ad.get("Owner")), []).append((job_id, ad))
        for owner, owned in by_owner.items():
            if os.geteuid() == 0:
                self._deliver_as_owner(store, owner, owned)
                continue
            for job_id, job_ad in owned:
                self._deliver_here(store, owner, job_id, job_ad)

    def _deliver_here(self, store: Store, owner: str, job_id: str,
                      ad: Mapping[str, Any]) -> None:
        """Not root: in this process, and only the outputs of the user running `up`."""
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

    def _deliver_as_owner(self, store: Store, owner: str,
                          owned: list[tuple[str, Mapping[str, Any]]]) -> None:
        """Root: the jobs of `owner` written with the Owner's rights, from this thread
        (`deliver_in_thread`) or in one child that becomes the Owner (`deliver_as`)."""
        try:
            entry = pwd.getpwnam(owner)
        except KeyError:
            for job_id, _ad in owned:
                self._failed(job_id, f"its Owner {owner!r} is not a user of this machine")
            return
        if entry.pw_uid == 0:
            for job_id, _ad in owned:
                self._failed(job_id, "outputs are never written as root")
            return
        user = (entry.pw_uid, entry.pw_gid)
        if privstate.per_thread():
            failed = deliver_in_thread(store, owned, user)
        else:
            store.scripts.ensure_loaded(["transfer_settle"])  # once here, known to the child
            failed = deliver_as(store, owned, user)
        for job_id, why in failed.items():
            self._failed(job_id, why)

    def _failed(self, job_id: str, why: str) -> None:
        if job_id not in self._tried:
            log.warning("job %s: outputs not delivered: %s", job_id, why)
            self._tried.add(job_id)


def deliver_in_thread(store: Store, jobs: list[tuple[str, Mapping[str, Any]]],
                      user: tuple[int, int]) -> dict[str, str]:
    """Deliver the outputs of `jobs` (job id, ad) from this thread, which takes `user`'s
    (uid, gid) rights (privstate.as_user: this thread's only) while it writes each
    job's files, and root's back for the pool's bookkeeping; the jobs not delivered,
    with why."""
    failed: dict[str, str] = {}
    for job_id, ad in jobs:
        try:
            delivery.deliver(store, job_id, ad, rights=lambda: privstate.as_user(user))
        except (FetchworkError, OSError) as exc:
            failed[job_id] = str(exc)
    return failed


def deliver_as(store: Store, jobs: list[tuple[str, Mapping[str, Any]]],
               user: tuple[int, int], timeout_s: float = DELIVERY_TIMEOUT_S) -> dict[str, str]:
    """Deliver the outputs of `jobs` (job id, ad) in a forked child that connects and
    then becomes `user` (uid, gid); the jobs not delivered, with why (the child's own
    words). The child uses `store`'s settings and loaded scripts, with a connection of
    its own (redis-py opens a new one in a new process)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in os._exit
        os.close(read_fd)
        _deliver_child(store, jobs, user, write_fd)
    os.close(write_fd)
    parts: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    stopped = ""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                stopped = f"the delivery took more than {timeout_s:.0f} s and was stopped"
                break
            piece = os.read(read_fd, 65536)
            if not piece:
                break
            parts.append(piece)
    finally:
        os.close(read_fd)
    _pid, status = os.waitpid(pid, 0)
    try:
        failed = {str(job): str(why) for job, why in json.loads(b"".join(parts)).items()}
    except (ValueError, AttributeError):
        why = stopped or f"the delivery ended with wait status {status} before it answered"
        failed = {job_id: why for job_id, _ad in jobs}
    return failed


def _deliver_child(store: Store, jobs: list[tuple[str, Mapping[str, Any]]],
                   user: tuple[int, int], write_fd: int) -> NoReturn:
    """In the forked child: connect, become `user`, deliver each job; never returns.
    Writes a JSON object of the jobs not delivered and why to `write_fd`."""
    failed: dict[str, str] = {}
    try:
        gc.disable()  # a short life: a collection would only copy the parent's pages
        for number in (signal.SIGTERM, signal.SIGINT):  # not the parent's handlers
            signal.signal(number, signal.SIG_DFL)
        store.client.ping()  # connected before the switch (see sandbox.py)
        become(f"{user[0]}:{user[1]}")
        for job_id, ad in jobs:
            try:
                delivery.deliver(store, job_id, ad)
            except FetchworkError as exc:
                failed[job_id] = str(exc)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which logs it
        why = str(exc) or type(exc).__name__
        failed.update({job_id: why for job_id, _ad in jobs if job_id not in failed})
    finally:
        try:
            data = json.dumps(failed).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(0)
