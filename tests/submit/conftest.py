"""Fixtures of the user commands' tests: the environment a command runs in (a
pool of the test session's Redis, no configuration file) and a broker of that
pool to queue and read jobs directly."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config


@pytest.fixture
def env(redis_url: str, pool_name: str, tmp_path: Path) -> dict[str, str]:
    return {"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path / "state")}


@pytest.fixture
def broker(redis_url: str, pool_name: str) -> Iterator[Broker]:
    client = redis.Redis.from_url(redis_url)
    yield Broker(client, pool_name, Config.load(environ={}))
    client.close()
