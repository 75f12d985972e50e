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
from redis.crc import key_slot

from fetchwork.broker.clusternode import pool_slot
from fetchwork.broker.keys import PoolKeys
from fetchwork.errors import RedisUnavailableError
from tests.redis_cluster import ClusterUnavailable, LocalCluster, pools_on_different_masters
from tests.test_pool import Up, _env, fw, history_json, q_json
from tests.waiting import wait_until

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
    local = None
    try:
        local = LocalCluster(tmp_path_factory.mktemp("cluster"))
        local.start()
    except (ClusterUnavailable, RedisUnavailableError, OSError) as exc:
        if local is not None:
            local.stop()
        pytest.skip(f"cannot form a local Redis Cluster: {exc}")
    yield local
    local.stop()


class ClusterPool:
    """One pool on the cluster: its name, environment, `fetchwork up` and job folder."""

    def __init__(self, name: str, root: Path, url: str):
        self.name = name
        self.root = root
        root.mkdir()
        root.chmod(0o777)
        self.env = _env(root / "state", FETCHWORK_BROKER=url, FETCHWORK_BROKER_CLUSTER="true",
                        FETCHWORK_POOL=name)
        self.runs = root / "runs"
        self.runs.mkdir()
        self.runs.chmod(0o777)
        self.up = Up(self.env, 2, root / "up.log")

    def submit(self, count: int, tag: str) -> None:
        (self.root / f"{tag}.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c 'sleep 1; touch {self.runs}/{tag}.$(Process).$$'\"\n"
            f"queue {count}\n")
        fw(self.env, "submit", f"{tag}.sub", cwd=self.root)

    def run_names(self) -> list[str]:
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
    """Both pools run jobs; the first pool's master is killed and restarted mid-run;
    more jobs are submitted after it; every job of both pools completes."""
    for pool in pools:
        pool.submit(JOBS_BEFORE, "before")
    wait_until(lambda: all(len(pool.run_names()) >= 2 for pool in pools), timeout_s=120,
               fail_if=lambda: pools[0].up.died() or pools[1].up.died(),
               what="both pools running jobs")
    cluster.restart(cluster.master_of(pools[0].name))
    for pool in pools:
        wait_until(lambda pool=pool: fw(pool.env, "q", check=False).returncode == 0,
                   timeout_s=60, what=f"pool {pool.name} answering after the restart")
        pool.submit(JOBS_AFTER, "after")
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
        assert set(pool.run_names()) == set(expected), pool.name


def test_each_pool_data_is_on_its_own_master(cluster, ran):
    for pool in ran:
        history_key = PoolKeys(pool.name).history
        counts = {port: cluster.node(port).exists(history_key) for port in cluster.ports
                  if port == cluster.master_of(pool.name)}
        assert list(counts.values()) == [1], (pool.name, counts)
