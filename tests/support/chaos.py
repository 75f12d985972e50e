"""A pool under random SIGKILLs: two startds, a broker pair and Redis with AOF on.

`ChaosPool(root, plan).run()` starts the pool, submits jobs while it
SIGKILLs a random process every few seconds (a startd, a starter, the broker
leader, or Redis) and starts each again as a supervisor would, then stops
killing, waits until every job has finished and checks the records
(tests/support/chaoscheck.py). Used by tests/pool/test_chaos.py (short) and bench/chaos.py
(long). Redis runs with `appendfsync always`: what it acknowledged survives
its SIGKILL (see docs/guarantees.md for `everysec`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError
from tests.support.chaoscheck import Kill, QueueView, Report, check, parse_runs
from tests.support.poolprocs import Daemon, RedisProcess, kill_leftovers, pool_config, starters_of
from tests.support.waiting import WaitTimeout, retrying, wait_until

T = TypeVar("T")

POOL = "chaos"
KINDS = ("startd", "starter", "leader", "redis")

# The job: log its start (claim token from its ad, starter pid, startd pid from
# its sandbox's name dir_<startd>_<slot>_<n>), sleep, log its end.
JOB_SCRIPT = """\
tok=$(sed -n 's/^FetchworkClaim = "\\(.*\\)"$/\\1/p' "$_CONDOR_JOB_AD")
startd=$(basename "$_CONDOR_SCRATCH_DIR" | cut -d_ -f2)
echo "start $1 $tok $PPID $startd $(date +%s.%N)" >> "$3"
sleep "$2"
echo "end $1 $tok $PPID $startd $(date +%s.%N)" >> "$3"
"""


# What a harness call meets while Redis restarts or fails over.
OUTAGE = (redis.ConnectionError, redis.TimeoutError, RedisUnavailableError)


@dataclass(frozen=True)
class ChaosPlan:
    jobs: int = 24
    job_s: float = 1.0
    chaos_s: float = 40.0
    kill_every_s: tuple[float, float] = (2.0, 4.0)
    restart_after_s: tuple[float, float] = (0.2, 1.0)
    lease_s: int = 6
    slots: int = 2
    drain_timeout_s: float = 90.0
    seed: int = 15


class ChaosPool:
    def __init__(self, root: Path, plan: ChaosPlan):
        self.root = root
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.work = root / "work"
        self.work.mkdir(mode=0o777, exist_ok=True)
        self.work.chmod(0o777)
        self.runs_log = self.work / "runs.log"
        self.runs_log.touch()
        self.runs_log.chmod(0o666)
        (self.work / "job.sh").write_text(JOB_SCRIPT)
        (self.work / "job.sh").chmod(0o755)
        self.redis = RedisProcess(root / "redis", appendfsync="always")
        self.brokers = [self._daemon(f"broker{n}", "broker", f"BROKER_REPLICA_NAME = b{n}\n")
                        for n in (1, 2)]
        self.startds = [self._daemon(f"startd{n}", "startd", f"NUM_SLOTS = {plan.slots}\n"
                                     f"FULL_HOSTNAME = chaos{n}\n") for n in (1, 2)]
        self.kills: list[Kill] = []
        self.unexpected: list[str] = []
        self.restarts = 0  # daemons that refused to start during a Redis restart
        self._down: set[int] = set()  # daemons killed on purpose, not yet started again
        self.submitted: list[str] = []
        self._client: redis.Redis | None = None
        self._broker: Broker | None = None

    def _daemon(self, name: str, command: str, extra: str) -> Daemon:
        folder = self.root / name
        folder.mkdir(mode=0o755, exist_ok=True)
        config = pool_config(folder, self.redis.url, POOL,
                             extra + f"JOB_DEFAULT_LEASE_DURATION = {self.plan.lease_s}\n"
                             "BROKER_LEADER_LEASE = 2\nFETCHWORK_REPORT_RETRY_TIME = 20\n")
        return Daemon(config, folder / f"{name}.log", command)

    @property
    def daemons(self) -> list[Daemon]:
        return [*self.brokers, *self.startds]

    def _retry(self, call: Callable[[], T]) -> T:
        """A call of the harness's own through a Redis just restarted (its old connection)."""
        return retrying(call, OUTAGE, timeout_s=30, interval_s=0.1)

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._client = redis.Redis(unix_socket_path=self.redis.socket)
            self._broker = Broker(self._client, pool=POOL, config=Config.load(environ={}))
        return self._broker

    # -- the run -------------------------------------------------------------

    def run(self) -> Report:
        self.redis.start()
        for daemon in self.daemons:
            daemon.start()
        # The pool is up before the first kill: a leader, and every slot fetching.
        wait_until(lambda: self._leader() is not None and
                   len(self._retry(self.broker.slots)) >= 2 * self.plan.slots,
                   60, interval_s=0.2, fail_if=self._first_failure, what="the pool up")
        self._submit(self.plan.jobs // 4)
        # The rest spread over the kill rounds, so jobs run all through the chaos.
        rounds = max(1.0, self.plan.chaos_s / (sum(self.plan.kill_every_s) / 2))
        per_round = -(-(self.plan.jobs - len(self.submitted)) // int(rounds))
        ends_at = time.monotonic() + self.plan.chaos_s
        while time.monotonic() < ends_at:
            self._pause(self.rng.uniform(*self.plan.kill_every_s))
            self._kill_one()
            self._submit(min(per_round, self.plan.jobs - len(self.submitted)))
        self._submit(self.plan.jobs - len(self.submitted))
        self._supervise()
        try:
            wait_until(self._all_finished, self.plan.drain_timeout_s, interval_s=0.5,
                       fail_if=self._supervise, what="every job finished after the chaos")
        except WaitTimeout:
            rows = self._retry(lambda: self.broker.job_fields(
                self.submitted, ["ProcId", "FetchworkState", "RemoteHost"]))
            self.unexpected += [f"not finished {self.plan.drain_timeout_s:g}s after the chaos: "
                                f"{row['ClusterId']}.{row['ProcId']} {row['FetchworkState']}"
                                for row in rows if row["FetchworkState"] not in
                                ("COMPLETED", "REMOVED")]
        return self.report()

    def _pause(self, seconds: float) -> None:
        """The chaos's own pace; restarts what died by itself meanwhile."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self._supervise()
            time.sleep(min(0.1, max(0.0, until - time.monotonic())))

    def _first_failure(self) -> str | None:
        return next(filter(None, (daemon.died() for daemon in self.daemons)), None)

    def _supervise(self) -> None:
        """Start again any daemon that exited without being killed. A broker that
        started while Redis was being restarted refuses to run (its supervisor
        starts it again); any other exit is a problem."""
        for daemon in self.daemons:
            if id(daemon) in self._down:
                continue
            if daemon.proc is not None and daemon.proc.poll() is not None:
                if "cannot reach the broker" not in daemon.text_of_this_run():
                    self.unexpected.append(f"{' '.join(daemon.command)} exited "
                                           f"{daemon.proc.returncode} by itself")
                self.restarts += 1
                daemon.start()

    def _submit(self, count: int) -> None:
        for _ in range(max(0, count)):
            name = f"j{len(self.submitted)}"
            ad = {"Cmd": "/bin/sh", "Iwd": str(self.work), "ChaosName": name,
                  "JobLeaseDuration": self.plan.lease_s,
                  "Arguments": f"job.sh {name} {self.plan.job_s} {self.runs_log}"}
            [job] = self._retry(lambda ad=ad: self.broker.submit([ad], owner="chaos"))
            self.submitted.append(job)

    def _kill_one(self) -> None:
        kind = self.rng.choice(KINDS)
        if kind == "starter":
            starters = [proc for startd in self.startds for proc in starters_of(startd)]
            if starters:
                victim = self.rng.choice(starters)
                self._record(kind, victim.pid)
                victim.kill()
                return
            kind = "startd"
        if kind == "redis":
            assert self.redis.proc is not None
            self._record(kind, self.redis.proc.pid)
            self.redis.kill()
            self._pause(self.rng.uniform(*self.plan.restart_after_s))
            self.redis.start()
            return
        daemon = self._leader() if kind == "leader" else self.rng.choice(self.startds)
        if daemon is None or daemon.pid is None:
            return
        self._record(kind, daemon.pid)
        self._down.add(id(daemon))
        daemon.kill()
        self._pause(self.rng.uniform(*self.plan.restart_after_s))
        daemon.start()
        self._down.discard(id(daemon))

    def _record(self, kind: str, pid: int) -> None:
        self.kills.append(Kill(time.time(), kind, pid))

    def _leader(self) -> Daemon | None:
        value = self._retry(lambda: self.broker.client.get(self.broker.keys.leader))
        name = value.decode() if value else None
        return next((b for n, b in enumerate(self.brokers, 1) if name == f"b{n}"), None)

    def _all_finished(self) -> bool:
        states = self._retry(lambda: self.broker.job_fields(self.submitted, ["JobStatus"]))
        return len(states) == len(self.submitted) and all(
            row["JobStatus"] in (3, 4) for row in states)

    # -- the records ---------------------------------------------------------

    def queue_view(self) -> QueueView:
        status = {f"{row['ClusterId']}.{row['ProcId']}": row["JobStatus"]
                  for row in self.broker.job_fields(self.submitted, ["ProcId", "JobStatus"])}
        completed: dict[str, list[float]] = {}
        reaped: dict[str, list[float]] = {}
        last = "0-0"
        while True:
            events = self.broker.events(last, count=5000)
            if not events:
                break
            for event_id, fields in events:
                at = int(event_id.split("-")[0]) / 1000.0
                job = fields.get("job", "")
                if fields.get("state") == "COMPLETED":
                    completed.setdefault(job, []).append(at)
                if fields.get("type") == "reap":
                    reaped.setdefault(job, []).append(at)
            last = events[-1][0]
        return QueueView(status, completed, reaped)

    def report(self) -> Report:
        """The checked records; problems also list daemons that exited by themselves."""
        by_name = {f"j{n}": job for n, job in enumerate(self.submitted)}
        runs = [replace(run, job=by_name.get(run.job, run.job))
                for run in parse_runs(self.runs_log.read_text())]
        result = check(self.submitted, runs, self.kills, self.queue_view())
        result.problems += self.unexpected
        return result

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.stop(timeout_s=30)
        if self._client is not None:
            self._client.close()
        self.redis.stop()
        kill_leftovers(str(self.runs_log))

