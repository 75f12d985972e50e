"""The broker's own tests again, on a pool of a local Redis Cluster.

Every test of tests/broker/test_client.py, tests/broker/store/test_reads.py and
tests/broker/dependencies/test_dependencies.py that works on a `broker` runs here with a broker
whose client is the cluster client of FETCHWORK_BROKER_CLUSTER: submissions,
claims, renewals, finishes, holds, removals, dependencies and reads, so each
of their Lua scripts, pipelines and transactions runs on a cluster node, which
refuses any that would reach beyond the pool's slot.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from types import ModuleType

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.connections.clusternode import PoolNodeClient
from fetchwork.config.loader import Config
from tests.broker import test_client as test_broker_client
from tests.broker.dependencies import test_dependencies
from tests.broker.store import test_reads as test_broker_reads
from tests.support.redis_cluster import LocalCluster, local_cluster_or_skip
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(120)


def _broker_tests(module: ModuleType, short: str) -> dict[str, object]:
    """The tests of `module` that take the `broker` fixture, under names prefixed by `short`."""
    return {f"test_{short}_{name[len('test_'):]}": value for name, value in vars(module).items()
            if name.startswith("test_") and callable(value)
            and "broker" in inspect.signature(value).parameters}


globals().update(_broker_tests(test_broker_client, "client"))
globals().update(_broker_tests(test_broker_reads, "reads"))
globals().update(_broker_tests(test_dependencies, "deps"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster_or_skip(tmp_path_factory.mktemp("cluster")) as local:
        yield local


@pytest.fixture
def broker(cluster: LocalCluster, pool_name: str) -> Iterator[Broker]:
    config = Config.load(environ={}).with_values(
        BROKER_CLAIM_SCAN_BATCH=16, JOB_DEFAULT_LEASE_DURATION=600,
        FETCHWORK_BROKER=cluster.url, FETCHWORK_BROKER_CLUSTER=True)
    client = connect(config, start=False, pool=pool_name)
    assert isinstance(client, PoolNodeClient)
    publish_rules(client, pool_name, config)  # as the pool's leader would
    yield Broker(client, pool_name, config)
    # A key outside the pool's slot would have been answered MOVED (and raised).
    assert client.moves == 0
    assert client.address == ("127.0.0.1", cluster.master_of(pool_name))
    client.close()


def test_the_tests_above_are_here() -> None:
    names = [name for name in globals() if name.startswith(("test_client_", "test_reads_",
                                                            "test_deps_"))]
    assert len(names) > 40, names
