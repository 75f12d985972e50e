"""The backfill tests (tests/broker/backfill/test_broker.py) again, on a pool of a local
Redis Cluster: here `redis_client` is the cluster client of the test's pool, so the
claims, the leader's backfill pass and BypassCount run on a cluster node, which
answers MOVED (raised, never followed) for any key outside the pool's slot."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

from fetchwork.broker.connections.clients import connect
from fetchwork.broker.connections.clusternode import PoolNodeClient
from fetchwork.config.loader import Config
from tests.broker.backfill import test_broker as source
from tests.broker.backfill.test_broker import pool  # noqa: F401 - the fixture the tests take
from tests.support.redis_cluster import LocalCluster, local_cluster_or_skip
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(120)

# Tests whose every fixture is one of these run here (the others read through the CLI).
ON_THE_CLUSTER = {"pool", "redis_client", "pool_name"}

globals().update({f"test_cluster_{name[len('test_'):]}": value
                  for name, value in vars(source).items()
                  if name.startswith("test_") and callable(value)
                  and set(inspect.signature(value).parameters) <= ON_THE_CLUSTER})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster_or_skip(tmp_path_factory.mktemp("cluster")) as local:
        yield local


@pytest.fixture
def redis_client(cluster: LocalCluster, pool_name: str) -> Iterator[PoolNodeClient]:
    config = Config.load(environ={}).with_values(FETCHWORK_BROKER=cluster.url,
                                                 FETCHWORK_BROKER_CLUSTER=True)
    client = connect(config, start=False, pool=pool_name)
    assert isinstance(client, PoolNodeClient)
    publish_rules(client, pool_name)  # as the pool's leader would
    yield client
    assert client.moves == 0
    client.close()


def test_the_backfill_tests_are_here() -> None:
    assert len([name for name in globals() if name.startswith("test_cluster_")]) >= 7
