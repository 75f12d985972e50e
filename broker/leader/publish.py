"""The leader publishes the pool's rules: what every submission is checked against.

The rules come from the broker service's configuration, the pool's own
(`pool_rules`); a submitting client's configuration has no say. Every tick
of the leader publishes them with the filter summary claims read
(store/poolrules.py, lua/publish_rules.lua): the same rules cost one small
script call, a change (a new configuration, a new leader that reads another
file) becomes a new version that the next submission is checked against.
Until the first publication every new job waits VALIDATING for the leader.
"""

from __future__ import annotations

import logging
import time

from fetchwork.broker.filters.gate import Summary
from fetchwork.broker.scheduling.settings import scheduling_settings
from fetchwork.broker.store import Store, poolrules
from fetchwork.broker.store.poolrules import PoolRules
from fetchwork.config.loader import Config

log = logging.getLogger(__name__)


def pool_rules(config: Config, summary: Summary) -> PoolRules:
    """The pool's rules from the broker service's configuration and the filter summary
    it publishes (`summary.submit`: every submission waits for the leader's admission).
    ConfigError names a malformed knob."""
    scheduling = scheduling_settings(config)
    return PoolRules(
        filtered=summary.submit,
        max_walltime_s=scheduling.max_walltime_s,
        default_walltime_s=scheduling.default_walltime_s,
        limits=scheduling.limits_on(),
        max_job_attrs=config.get_int("SUBMIT_MAX_JOB_ATTRS"),
        events_maxlen=config.get_int("BROKER_EVENTS_MAXLEN"),
        default_lease_s=config.get_duration_s("JOB_DEFAULT_LEASE_DURATION"),
        default_exclusive=config.get_bool("DEFAULT_JOB_EXCLUSIVE"))


def pool_knobs(config: Config) -> dict[str, str]:
    """The knobs of `config` that are the pool's (poolrules.is_pool_knob), as expanded."""
    return {definition.name: value for definition, value in config.items()
            if poolrules.is_pool_knob(definition.name)}


def describe(rules: PoolRules) -> str:
    """The rules as a log line: knob = value."""
    return ", ".join(f"{'/'.join(poolrules.KNOBS[name])}={value or 'off'}"
                     for name, value in rules.fields().items() if name in poolrules.KNOBS)


class RulesPublisher:
    """Publishes one pool's rules, and the filter summary, on every leader tick."""

    def __init__(self, store: Store, rules: PoolRules, summary: Summary, replica: str,
                 knobs: dict[str, str] | None = None):
        self.store = store
        self.rules = rules
        self.knobs = knobs or {}
        self.summary = summary
        self.replica = replica
        self.version: int | None = None

    @classmethod
    def from_config(cls, store: Store, config: Config, summary: Summary,
                    replica: str) -> RulesPublisher:
        """The rules of `config`, published with the filter summary `summary`."""
        return cls(store, pool_rules(config, summary), summary, replica, pool_knobs(config))

    def publish(self) -> int:
        """Publish (a no-op for the store when nothing changed); the version in force."""
        version, changed = poolrules.publish(self.store, self.rules, self.knobs,
                                             self.summary.fields(), self.replica, time.time())
        if changed:
            log.info("published the rules of pool %s, version %d: %s", self.store.pool,
                     version, describe(self.rules))
        self.version = version
        return version
