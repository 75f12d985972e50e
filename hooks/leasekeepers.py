"""The reference hooks' lease keepers: one thread renews the leases of a process.

In-process, the prepare hook keeps its job's claim alive while the starter
lives: the first check FIRST_CHECK_S after the start (a job that ends sooner
costs no renewal), then every FETCHWORK_RENEW_INTERVAL seconds or every
third of the lease, whichever is shorter. One thread of the process serves
every keeper by its next check's time. A keeper of its own per job had a
hook thread woken twice a job (to start waiting, then to stop), each time
taking the interpreter's lock from the starter as it started or ended the
job; here a job that ends before its first check wakes no thread at all.

The thread is started with the first keeper (never in the starter zygote,
which forks) and serves the process's later jobs, a kept starter's included.
A renewal that blocks (a broker outage) holds up the others of the same
process, which a starter runs one at a time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from fetchwork.errors import FetchworkError

log = logging.getLogger(__name__)

# Seconds from a job's start to its lease keeper's first check of the claim.
FIRST_CHECK_S = 1.0

Renew = Callable[[str, str], str]
Act = Callable[[str, str, "int | None"], None]


class LeaseKeeper:
    """The renewals of one job's lease, until stopped or the claim is gone."""

    def __init__(self, job_id: str, token: str, lease_s: float, renew_s: float):
        self.job_id = job_id
        self.token = token
        # Often enough for the lease, and for `fetchwork rm` or `hold` of a
        # running job to stop it soon.
        self.interval_s = max(0.1, min(lease_s / 3.0, renew_s))
        self.next_at = 0.0
        self.stopped = False
        # The starter's run this job is (set when the keeper starts): a keeper left
        # renewing past its job (its exit hook failed, so the startd still holds the
        # outcome and the lease must not lapse) cannot stop the next job of a kept
        # starter.
        self.control_run: int | None = None

    def check(self, renew: Renew, act: Act) -> bool:
        """Renew once and act on the answer; whether to go on renewing."""
        try:
            status = renew(self.job_id, self.token)
        except FetchworkError as exc:
            log.warning("job %s: lease renewal failed: %s", self.job_id, exc)
            return True
        except Exception:  # keep renewing through transient broker errors
            log.exception("job %s: lease renewal failed", self.job_id)
            return True
        if self.stopped:  # the job ended meanwhile
            return False
        if status != "ok":
            act(self.job_id, status, self.control_run)
            return status != "gone"
        return True

    def stop(self) -> None:
        self.stopped = True


class LeaseKeepers:
    """The keepers of one process, by job id, and the thread that serves them."""

    def __init__(self, renew: Renew, act: Act):
        self._renew = renew
        self._act = act
        self._wake = threading.Condition(threading.Lock())
        self._keepers: dict[str, LeaseKeeper] = {}
        self._thread_pid: int | None = None
        self._waits_until = float("inf")  # when the thread wakes next, as it last said

    def warm(self) -> None:
        """Start the thread now, before any job (a starter forked ahead does, while it
        waits), so that no job's prepare hook waits for it to start."""
        with self._wake:
            self._serving()

    def start(self, keeper: LeaseKeeper) -> None:
        """Keep `keeper` (replacing one of the same job) from now on."""
        keeper.next_at = time.monotonic() + min(keeper.interval_s, FIRST_CHECK_S)
        with self._wake:
            old = self._keepers.pop(keeper.job_id, None)
            self._keepers[keeper.job_id] = keeper
            if self._serving() and keeper.next_at < self._waits_until:
                self._wake.notify()
        if old is not None:
            old.stop()

    def _serving(self) -> bool:
        """With the lock held: whether this process's thread was running already
        (else it is started now: none yet, or only the parent's before a fork)."""
        if self._thread_pid == os.getpid():
            return True
        self._thread_pid = os.getpid()
        self._waits_until = float("inf")
        threading.Thread(target=self._serve, name="lease-keepers", daemon=True).start()
        return False

    def stop(self, job_id: str) -> None:
        """Stop renewing the job's lease (the thread is not woken for it)."""
        with self._wake:
            keeper = self._keepers.pop(job_id, None)
        if keeper is not None:
            keeper.stop()

    def _serve(self) -> None:
        while True:
            with self._wake:
                due = self._due_or_wait()
            for keeper in due:
                if not keeper.check(self._renew, self._act):
                    with self._wake:
                        if self._keepers.get(keeper.job_id) is keeper:
                            del self._keepers[keeper.job_id]
                keeper.next_at = time.monotonic() + keeper.interval_s

    def _due_or_wait(self) -> list[LeaseKeeper]:
        """With the lock held: the keepers whose check is due, after waiting for one."""
        while True:
            now = time.monotonic()
            due = [keeper for keeper in self._keepers.values() if keeper.next_at <= now]
            if due:
                self._waits_until = now
                return due
            self._waits_until = min((keeper.next_at for keeper in self._keepers.values()),
                                    default=float("inf"))
            timeout = None if self._waits_until == float("inf") else self._waits_until - now
            self._wake.wait(timeout)
