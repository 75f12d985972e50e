"""Two pools on a local three-master Redis Cluster: each on its own master, through
`redis://` cluster URLs with FETCHWORK_BROKER_CLUSTER; both run jobs with a real
`fetchwork up` (broker service, startd, starters), and a master restarted with its
AOF loses neither pool's jobs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.acl import user_line
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.connections.clusternode import PoolNodeClient, pool_slot
from fetchwork.broker.store.keys import PoolKeys
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError
from tests.support.pools import Up, fw, history_json, pool_env, q_json
from tests.support.redis_cluster import (
    LocalCluster,
    local_cluster_or_skip,
    pools_on_different_masters,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

JOBS_BEFORE = 6
JOBS_AFTER = 4


def test_every_key_of_a_pool_is_in_the_pool_slot():
    keys = PoolKeys("alpha")
    names = [getattr(keys, name) for name, value in vars(PoolKeys).items()
             if isinstance(value, property)]
    names += [keys.job("3.1"), keys.slot("slot1@host"), keys.dependents("3.1"),
              keys.activation("tok"), keys.activation_reply("tok")]
    assert len(names) > 20
    assert {key_slot(name.encode()) for name in names} == {pool_slot("alpha")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster_or_skip(tmp_path_factory.mktemp("cluster")) as local:
        yield local


def _config(tmp_path: Path, url: str) -> Config:
    path = tmp_path / "fetchwork.conf"
    path.write_text(f"FETCHWORK_BROKER = {url}\nFETCHWORK_BROKER_CLUSTER = true\n")
    return Config.load(environ={"HOME": str(tmp_path)}, config_file=str(path))


def test_the_client_follows_its_pool_slot_when_it_moves(cluster, tmp_path):
    pool = "moving"
    keys = PoolKeys(pool)
    client = connect(_config(tmp_path, cluster.url), start=False, pool=pool)
    assert isinstance(client, PoolNodeClient)
    home = cluster.master_of(pool)
    assert client.address == ("127.0.0.1", home)
    other = next(port for port in cluster.ports if port != home)
    cluster.move_empty_slot(pool_slot(pool), other)
    try:
        # The old master answers MOVED; the command goes on to the new one.
        client.set(keys.leader, b"here")
        assert client.address == ("127.0.0.1", other)
        assert client.moves == 1
        assert cluster.node(other).get(keys.leader) == b"here"
        client.delete(keys.leader)
        cluster.move_empty_slot(pool_slot(pool), home)
        # A transaction is not sent again; the caller sees an unreachable Redis
        # (and retries it), and the client already points at the slot's master.
        pipe = client.pipeline(transaction=True)
        pipe.set(keys.leader, b"back")
        with pytest.raises(redis.ConnectionError, match="MOVED|moved|slot"):
            pipe.execute()
        assert client.address == ("127.0.0.1", home)
        assert client.set(keys.leader, b"back")
        assert cluster.node(home).get(keys.leader) == b"back"
    finally:
        client.delete(keys.leader)
        if cluster.master_of(pool) != home:
            cluster.move_empty_slot(pool_slot(pool), home)
        client.close()


def test_a_pool_role_user_reaches_its_master(cluster, tmp_path):
    pool = "roles"
    for port in cluster.ports:  # ACL users are per node
        cluster.node(port).execute_command(
            *user_line("fw-roles-submitter", "submitter", pool, "pw-s", as_command=True).split())
    (tmp_path / "pw").write_text("pw-s\n")
    (tmp_path / "fetchwork.conf").write_text(
        f"FETCHWORK_BROKER = {cluster.url}\nFETCHWORK_BROKER_CLUSTER = true\n"
        f"FETCHWORK_BROKER_USERNAME = fw-roles-submitter\n"
        f"FETCHWORK_BROKER_PASSWORD_FILE = {tmp_path / 'pw'}\n")
    config = Config.load(environ={"HOME": str(tmp_path)},
                         config_file=str(tmp_path / "fetchwork.conf"))
    broker = Broker(connect(config, start=False, pool=pool), pool, config)
    try:
        assert broker.client.address == ("127.0.0.1", cluster.master_of(pool))
        assert broker.next_cluster() == 1
        assert broker.queued_ids() == []
    finally:
        broker.client.close()
        for port in cluster.ports:
            cluster.node(port).execute_command("ACL", "DELUSER", "fw-roles-submitter")


def test_a_cluster_broker_needs_a_tcp_url(tmp_path):
    with pytest.raises(RedisUnavailableError, match="not a unix socket"):
        connect(_config(tmp_path, "unix:///nowhere.sock"), start=False, pool="p")


class ClusterPool:
    """One pool on the cluster: its name, environment, `fetchwork up` and job folder."""

    def __init__(self, name: str, root: Path, url: str):
        self.name = name
        self.root = root
        root.mkdir()
        root.chmod(0o777)
        self.env = pool_env(root / "state", FETCHWORK_BROKER=url,
                            FETCHWORK_BROKER_CLUSTER="true", FETCHWORK_POOL=name)
        self.runs = root / "runs"
        self.runs.mkdir()
        self.runs.chmod(0o777)
        self.up = Up(self.env, 2, root / "up.log")

    def submit(self, count: int, tag: str, gate: Path) -> None:
        """`count` jobs that leave a file each, then wait for `gate` to exist."""
        (self.root / f"{tag}.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c 'touch {self.runs}/{tag}.$(Process).$$; "
            f"while [ ! -e {gate} ]; do sleep 0.1; done'\"\n"
            f"queue {count}\n")
        fw(self.env, "submit", f"{tag}.sub", cwd=self.root)

    def run_names(self) -> list[str]:
        """One `<tag>.<proc>` per run of a job (a job run twice shows twice)."""
        return sorted(".".join(p.name.split(".")[:2]) for p in self.runs.iterdir())


@pytest.fixture(scope="module")
def pools(cluster: LocalCluster) -> Iterator[tuple[ClusterPool, ClusterPool]]:
    first, second = pools_on_different_masters(cluster, "shard")
    # Outside pytest's private tree: under root the jobs run as nobody.
    base = Path(tempfile.mkdtemp(prefix="fw-cluster-"))
    base.chmod(0o755)
    made: list[ClusterPool] = []
    try:
        for name in (first, second):
            made.append(ClusterPool(name, base / name, cluster.url))
        for pool in made:
            wait_until(lambda pool=pool: fw(pool.env, "status", check=False).stdout
                       .count("slot") >= 2, timeout_s=90, fail_if=pool.up.died,
                       what=f"two slots of pool {pool.name}")
        yield made[0], made[1]
    finally:
        for pool in made:
            if pool.up.stop() != 0:
                pool.up.kill_all()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def ran(cluster: LocalCluster, pools: tuple[ClusterPool, ClusterPool]
        ) -> tuple[ClusterPool, ClusterPool]:
    """Both pools run jobs; the first pool's master is killed and restarted while
    two jobs of each pool run; more jobs are submitted after it; every job of both
    pools completes."""
    gate = pools[0].root.parent / "restarted"
    for pool in pools:
        pool.submit(JOBS_BEFORE, "before", gate)
    wait_until(lambda: all(len(pool.run_names()) >= 2 for pool in pools), timeout_s=120,
               fail_if=lambda: pools[0].up.died() or pools[1].up.died(),
               what="two jobs of each pool running")
    cluster.restart(cluster.master_of(pools[0].name))
    gate.touch()
    for pool in pools:
        wait_until(lambda pool=pool: fw(pool.env, "q", check=False).returncode == 0,
                   timeout_s=60, what=f"pool {pool.name} answering after the restart")
        pool.submit(JOBS_AFTER, "after", gate)
    for pool in pools:
        wait_until(lambda pool=pool: q_json(pool.env) == [], timeout_s=180,
                   fail_if=pool.up.died, what=f"every job of pool {pool.name} to complete")
    return pools


def test_the_pools_live_on_different_masters(cluster, pools):
    first, second = pools
    assert cluster.master_of(first.name) != cluster.master_of(second.name)


def test_every_job_of_both_pools_completed(ran):
    for pool in ran:
        history = history_json(pool.env)
        assert len(history) == JOBS_BEFORE + JOBS_AFTER, (pool.name, history)
        assert all(ad["JobStatus"] == 4 and ad["ExitCode"] == 0 for ad in history)
        expected = [f"before.{n}" for n in range(JOBS_BEFORE)]
        expected += [f"after.{n}" for n in range(JOBS_AFTER)]
        # Each job ran once: the runs that spanned the restart were not run again.
        assert pool.run_names() == sorted(expected), pool.name


def test_each_pool_data_is_on_its_own_master(cluster, ran):
    for pool in ran:
        history_key = PoolKeys(pool.name).history
        counts = {port: cluster.node(port).exists(history_key) for port in cluster.ports
                  if port == cluster.master_of(pool.name)}
        assert list(counts.values()) == [1], (pool.name, counts)
