"""A Redis master, its replica and one sentinel (quorum 1) on local TCP ports.

`SentinelSet(folder).start()` runs them as children of the test (so it owns
their pids), with a short `down-after-milliseconds` and `failover-timeout`,
and waits until the replica is in sync and the sentinel knows it. `url` is
the `redis+sentinel://` URL of the set; `kill_master()` is SIGKILL, after
which `wait_failover()` waits until the sentinel names the replica master.
The sentinel is Debian's `redis-sentinel` when on PATH, else the same
redis-server binary started with `--sentinel`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fetchwork.broker.connections.embedded import find_server
from fetchwork.errors import RedisUnavailableError
from tests.support.ports import reserve_port
from tests.support.waiting import wait_until

MASTER_SET = "fwmaster"
HOST = "127.0.0.1"


def sentinel_binaries() -> tuple[list[str], list[str]] | None:
    """The argv of redis-server and of a sentinel, each before its configuration file
    and options; None when there is no server."""
    try:
        server = shutil.which("redis-server") or find_server()
    except RedisUnavailableError:
        return None
    sentinel = shutil.which("redis-sentinel")
    return [server], ([sentinel] if sentinel else [server])


def _probe(port: int) -> redis.Redis:
    return redis.Redis(HOST, port, socket_timeout=2, retry=Retry(NoBackoff(), 0),
                       decode_responses=True)


class SentinelSet:
    def __init__(self, folder: Path, down_after_ms: int = 1000, failover_timeout_ms: int = 5000):
        binaries = sentinel_binaries()
        assert binaries is not None, "no redis-server binary"
        self.server_argv, self.sentinel_argv = binaries
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.master_port, self.replica_port, self.sentinel_port = (
            reserve_port(), reserve_port(), reserve_port())
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis+sentinel://{HOST}:{self.sentinel_port}/{MASTER_SET}"

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.folder / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, cwd=self.folder)

    def _server(self, name: str, port: int, *extra: str) -> None:
        data = self.folder / name
        data.mkdir(exist_ok=True)
        self._spawn(name, [*self.server_argv, "--port", str(port), "--bind", HOST,
                           "--dir", str(data), "--save", "", "--appendonly", "no", *extra])

    def start(self) -> None:
        self._server("master", self.master_port)
        wait_until(lambda: self.answers(self.master_port), 30, fail_if=self.died,
                   what="the master answering")
        self._server("replica", self.replica_port, "--replicaof", HOST, str(self.master_port))
        conf = self.folder / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\nbind {HOST}\ndir {self.folder}\n"
            f"sentinel monitor {MASTER_SET} {HOST} {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_SET} {self.down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_SET} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {MASTER_SET} 1\n")
        self._spawn("sentinel", [*self.sentinel_argv, str(conf), "--sentinel"])
        wait_until(self.replica_known, 60, interval_s=0.2, fail_if=self.died,
                   what="the replica in sync and known to the sentinel")

    def answers(self, port: int) -> bool:
        try:
            with _probe(port) as probe:
                return bool(probe.ping())
        except redis.RedisError:
            return False

    def replica_known(self) -> bool:
        try:
            with _probe(self.replica_port) as replica:
                if replica.info("replication").get("master_link_status") != "up":
                    return False
            with _probe(self.sentinel_port) as sentinel:
                replicas = sentinel.execute_command("SENTINEL", "REPLICAS", MASTER_SET)
        except redis.RedisError:
            return False
        return any(str(self.replica_port) in str(entry) for entry in replicas)

    def master_port_now(self) -> int | None:
        try:
            with _probe(self.sentinel_port) as sentinel:
                found = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                                 MASTER_SET)
        except redis.RedisError:
            return None
        return int(found[1]) if found else None

    def kill_master(self) -> int:
        """SIGKILL the master; its pid."""
        proc = self.procs["master"]
        proc.kill()
        proc.wait(30)
        return proc.pid

    def promoted(self) -> bool:
        """The sentinel names the replica master, and it answers as one."""
        if self.master_port_now() != self.replica_port:
            return False
        try:
            with _probe(self.replica_port) as server:
                return server.info("replication").get("role") == "master"
        except redis.RedisError:
            return False

    def died(self) -> str | None:
        for name, proc in self.procs.items():
            if name != "master" and proc.poll() is not None:
                text = (self.folder / f"{name}.log").read_text(errors="replace")
                return f"{name} exited {proc.returncode}: {text[-2000:]}"
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
