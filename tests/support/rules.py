"""Publishing a pool's rules in tests, as its broker service's leader does.

A pool whose leader has never published its rules fails closed: every new
job waits VALIDATING for the leader. Tests that stand up no broker service
(a Broker on the session's Redis, claiming directly) publish the rules of a
configuration the way the leader would (leader/publish.py), so that their
submissions meet the rules of that configuration.
"""

from __future__ import annotations

import redis

from fetchwork.broker.filters.gate import Summary, summary_of
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher
from fetchwork.broker.store import Store
from fetchwork.config.loader import Config


def publish_rules(client: redis.Redis, pool: str, config: Config | None = None,
                  with_filters: bool = True) -> int:
    """Publish the rules of `config` (default: defaults.conf alone) for `pool`, as its
    leader would; the version in force."""
    config = config if config is not None else Config.load(environ={})
    summary = summary_of(load_settings(config)) if with_filters else Summary()
    store = Store(client, pool, config.get_int("BROKER_EVENTS_MAXLEN"))
    return RulesPublisher.from_config(store, config, summary, "tests").publish()
