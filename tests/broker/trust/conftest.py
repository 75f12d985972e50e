"""A signing leader over the suite's Redis, as the pool's broker service runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher, pool_rules
from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config.loader import Config


@pytest.fixture
def signing_leader(tmp_path: Path, redis_client: redis.Redis, pool_name: str):
    """(broker, leader that signs, the pool's public key's PEM file); the pool's rules
    published as the leader does, so with a signer every new job waits for it."""
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    signer = Signer((tmp_path / "k.pem").read_bytes(), "k.pem", pool_name)
    config = Config.load(environ={})
    broker = Broker(redis_client, pool_name, config)
    leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                          signer=signer)
    RulesPublisher(broker.store, pool_rules(config, leader.summary()), leader.summary(),
                   "tests").publish()
    yield broker, leader, tmp_path / "p.pem"
    leader.close()

