"""The autocluster index the Lua scripts write reads back as autoclusters.py spells it."""

from __future__ import annotations

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.store.acmembers import AUTOCLUSTER_ATTR, member
from fetchwork.config.loader import Config


@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


@pytest.mark.parametrize("prio", [0, 7, -3])
def test_lua_members_are_the_python_members(broker, prio):
    jobs = broker.submit([{"Cmd": "/bin/true", "JobPrio": prio}] * 3, owner="alice")
    ad = broker.get(jobs[1])
    expected = member(ad[AUTOCLUSTER_ATTR], ad["FetchworkOrder"], jobs[1])
    stored = [raw.decode() for raw in broker.client.zrange(broker.keys.ac_members, 0, -1)]
    assert expected in stored
    # A claim takes the head and the group's score moves to the next job.
    assert broker.claim({"Name": "slot1@host", "Memory": 1024, "START": True}) is not None
    score = broker.client.zscore(broker.keys.ac_groups, ad[AUTOCLUSTER_ATTR])
    assert score == float(ad["FetchworkOrder"])
