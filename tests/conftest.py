"""Shared fixtures: one real redis-server per test session, on a unix socket.

The server is started through the embedded-Redis module, the same code path
users get when FETCHWORK_BROKER is unset. Tests isolate themselves with a
unique pool name instead of flushing the database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from fetchwork.broker.embedded import EmbeddedRedis


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
