"""Shared fixtures: one real redis-server per test session, on a unix socket.

The server is started through the embedded-Redis module, the same code path
users get when FETCHWORK_BROKER is unset. Tests isolate themselves with a
unique pool name instead of flushing the database. Each worker of a parallel
run (pytest-xdist) is a session of its own, with its own server.

Hypothesis keeps its examples outside the checkout (tests/support/scratch.py).
The modules of the pool tier (tests/support/tiers.py) are marked `pool` here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from fetchwork.broker.connections.embedded import EmbeddedRedis
from fetchwork.config.loader import Config
from tests.support.folders import open_folder
from tests.support.rules import publish_rules
from tests.support.scratch import kept_folder
from tests.support.starter_bench import Bench
from tests.support.tiers import is_pool

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(kept_folder("hypothesis")))

TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the pool tier `pool`. In a parallel run, its modules go first: the workers
    take modules in this order, and the long ones must not be left to the end."""
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(TESTS) and is_pool(path.relative_to(TESTS).as_posix()):
            item.add_marker(pytest.mark.pool)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("pool") is None)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-state"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def pool_name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def published_rules(request: pytest.FixtureRequest) -> None:
    """A test's pool on the session's Redis has the default rules published, as a pool
    whose broker service has run once (else every new job waits for its leader: the
    pool fails closed). A test that wants another configuration's rules publishes
    them (tests/support/rules.py); one that wants none deletes the settings key."""
    if "pool_name" not in request.fixturenames or "redis_url" not in request.fixturenames:
        return
    client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    try:
        publish_rules(client, request.getfixturevalue("pool_name"))
    finally:
        client.close()


@pytest.fixture
def job_tmp(tmp_path: Path) -> Iterator[Path]:
    """A temporary folder the jobs can reach.

    Jobs never run as root: under a root test run they run as nobody, who
    cannot enter pytest's private temporary tree, so the folder is made
    elsewhere in the system temp dir, open to all, and removed afterwards.
    """
    if os.geteuid() != 0:
        yield tmp_path
        return
    with open_folder("fw-test-") as folder:
        yield folder


@pytest.fixture
def config_with_defaults(tmp_path: Path) -> Callable[[str], Config]:
    """Build a configuration: defaults.conf, then the given text as the admin's file.

    No environment variable and no pool file take part, so knobs the text does
    not set have their defaults.conf values.
    """
    def build(text: str) -> Config:
        path = tmp_path / "fetchwork.conf"
        path.write_text(text)
        environ = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
        return Config.load(environ=environ, config_file=str(path))
    return build


@pytest.fixture
def bench() -> Iterator[Bench]:
    """A fresh folder for starters, their hooks and records; every starter is closed after."""
    base = Path(tempfile.mkdtemp(prefix="fw-starter-"))
    base.chmod(0o755)
    setup = Bench(base)
    yield setup
    for run in setup.runs:
        run.close()
    shutil.rmtree(base, ignore_errors=True)
