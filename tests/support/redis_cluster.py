"""A local Redis Cluster of three masters for tests: real redis-server processes with AOF.

`LocalCluster` starts the nodes (cluster mode, appendonly) on TCP ports
reserved with their bus ports (tests/support/ports.py), joins them with
`redis-cli --cluster create` when redis-cli exists, else by CLUSTER ADDSLOTS
and MEET from Python, and can restart one master on its port and folder so
it comes back with its data and its slots.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from fetchwork.broker.connections.clusternode import pool_slot
from fetchwork.broker.connections.embedded import find_server
from fetchwork.errors import RedisUnavailableError
from tests.support.ports import NoFreePort, reserve_port
from tests.support.waiting import WaitTimeout, wait_until

SLOTS = 16384
# A node's cluster bus listens this far above its port.
BUS_OFFSET = 10000


class ClusterUnavailable(Exception):
    """A cluster could not be formed on this machine (the test using it is skipped)."""


def _free_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, both reserved."""
    try:
        return reserve_port(also=(BUS_OFFSET,))
    except NoFreePort as exc:
        raise ClusterUnavailable("no free pair of ports for a cluster node") from exc


class LocalCluster:
    """Three cluster-mode redis-servers under `root`, their slots split evenly."""

    def __init__(self, root: Path, masters: int = 3):
        self.root = root
        self.binary = find_server()
        self.ports = [_free_port() for _ in range(masters)]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self, use_cli: bool = True) -> None:
        try:
            for port in self.ports:
                self.start_node(port)
            self._join(shutil.which("redis-cli") if use_cli else None)
            wait_until(self._all_ok, timeout_s=30, what="cluster_state:ok on every node")
        except (WaitTimeout, redis.RedisError) as exc:
            self.stop()
            raise ClusterUnavailable(str(exc)) from exc

    def start_node(self, port: int) -> None:
        folder = self.root / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        self.processes[port] = subprocess.Popen(
            [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", "2000", "--appendonly", "yes",
             "--appendfsync", "always", "--save", "", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(lambda: self._pings(port), timeout_s=20, fail_if=lambda: self._died(port),
                   what=f"redis-server on port {port}")

    def _died(self, port: int) -> str | None:
        code = self.processes[port].poll()
        if code is None:
            return None
        return f"exited {code}: {(self.root / str(port) / 'server.log').read_text()[-2000:]}"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def _pings(self, port: int) -> bool:
        try:
            return bool(self.node(port).ping())
        except redis.RedisError:
            return False

    def _join(self, cli: str | None) -> None:
        if cli:
            done = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                raise ClusterUnavailable(f"redis-cli --cluster create failed: {done.stdout}"
                                         f"{done.stderr}")
            return
        step = SLOTS // len(self.ports)
        for index, port in enumerate(self.ports):
            last = SLOTS - 1 if index == len(self.ports) - 1 else (index + 1) * step - 1
            self.node(port).execute_command("CLUSTER", "ADDSLOTS", *range(index * step, last + 1))
            if index:
                self.node(port).execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])

    def _all_ok(self) -> bool:
        for port in self.ports:
            try:
                info = self.node(port).execute_command("CLUSTER", "INFO")
            except redis.RedisError:
                return False
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text or f"cluster_known_nodes:{len(self.ports)}" \
                    not in text:
                return False
        return True

    def master_of(self, pool: str) -> int:
        """The port of the master serving `pool`'s slot."""
        slot = pool_slot(pool)
        owner = self.owner_seen_by(self.ports[0], slot)
        if owner is None:
            raise AssertionError(f"slot {slot} of pool {pool} is not served")
        return owner

    def restart(self, port: int) -> None:
        """Crash one master (SIGKILL); start it again on its port and folder (AOF, nodes.conf)."""
        process = self.processes[port]
        process.kill()
        process.wait(timeout=30)
        self.start_node(port)
        wait_until(self._all_ok, timeout_s=60, what="the cluster healthy after the restart")

    def node_id(self, port: int) -> str:
        answer = self.node(port).execute_command("CLUSTER", "MYID")
        return answer.decode() if isinstance(answer, bytes) else str(answer)

    def owner_seen_by(self, port: int, slot: int) -> int | None:
        """The port of the master that the node on `port` says serves `slot`."""
        for start, end, master, *_ in self.node(port).execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(master[1])
        return None

    def move_empty_slot(self, slot: int, to_port: int) -> None:
        """Give `slot` (holding no keys) to the master on `to_port`, as a resharding
        does: importing and migrating first, the new owner told first, and its config
        epoch bumped, so the old owner's gossip cannot take the slot back. Returns once
        every node says the new owner serves it."""
        target = self.node_id(to_port)
        source = self.owner_seen_by(to_port, slot)
        if source is not None and source != to_port:
            self.node(to_port).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING",
                                               self.node_id(source))
            self.node(source).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target)
        for port in sorted(self.ports, key=lambda p: p != to_port):
            self.node(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target)
        self.node(to_port).execute_command("CLUSTER", "BUMPEPOCH")
        wait_until(lambda: all(self.owner_seen_by(port, slot) == to_port for port in self.ports),
                   timeout_s=30, what=f"every node giving slot {slot} to port {to_port}")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@contextmanager
def local_cluster_or_skip(root: Path) -> Iterator[LocalCluster]:
    """A started LocalCluster under `root`, stopped on leaving; the test is skipped with
    the reason when no cluster forms here."""
    try:
        local = LocalCluster(root)
        local.start()
    except (ClusterUnavailable, RedisUnavailableError, OSError) as exc:
        pytest.skip(f"cannot form a local Redis Cluster: {exc}")
    try:
        yield local
    finally:
        local.stop()


def pools_on_different_masters(cluster: LocalCluster, prefix: str) -> tuple[str, str]:
    """Two pool names starting with `prefix` whose slots two different masters serve."""
    first = f"{prefix}0"
    owner = cluster.master_of(first)
    for index in range(1, 200):
        name = f"{prefix}{index}"
        if cluster.master_of(name) != owner:
            return first, name
    raise AssertionError("no two pool names on different masters")
