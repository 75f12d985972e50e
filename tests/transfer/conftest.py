"""What the transfer tests share: the pool's store on the suite's Redis."""

from __future__ import annotations

import pytest
import redis

from fetchwork.broker.store import Store


@pytest.fixture
def store(redis_client: redis.Redis, pool_name: str) -> Store:
    return Store(redis_client, pool_name, 1000)
