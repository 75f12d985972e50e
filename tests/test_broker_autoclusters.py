"""Autoclusters in Redis: the scripts keep the groups, claims walk them (real Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fetchwork.broker import autoclusters
from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(120)

NEEDS_MEMORY = {"$expr": "TARGET.Memory >= MY.RequestMemory"}


@pytest.fixture
def broker(redis_client: redis.Redis, pool_name: str) -> Iterator[Broker]:
    yield Broker(redis_client, pool=pool_name, config=Config.load(environ={}))


def job(memory: int, **attrs: Any) -> dict[str, Any]:
    return {"Cmd": "/bin/true", "Iwd": "/tmp", "RequestMemory": memory,
            "Requirements": NEEDS_MEMORY, **attrs}


def slot(memory: int, start: str = "true") -> dict[str, Any]:
    return {"Name": f"slot1@m{memory}", "Memory": memory, "Start": {"$expr": start}}


def index_of(broker: Broker) -> tuple[dict[str, set[str]], dict[str, float]]:
    """ac:members by group, and ac:groups' scores."""
    client, keys = broker.client, broker.keys
    members: dict[str, set[str]] = {}
    for raw in client.zrange(keys.ac_members, 0, -1):
        gid, _order, job_id = autoclusters.parse_member(raw.decode())
        members.setdefault(gid, set()).add(job_id)
    scores = {gid.decode(): score
              for gid, score in client.zrange(keys.ac_groups, 0, -1, withscores=True)}
    return members, scores


def expected_index(broker: Broker) -> tuple[dict[str, set[str]], dict[str, float]]:
    """What the index must hold: every IDLE job in its group, groups scored by their best."""
    members: dict[str, set[str]] = {}
    scores: dict[str, float] = {}
    for ad in broker.query('FetchworkState == "IDLE"'):
        gid, order = str(ad["FetchworkAutocluster"]), float(ad["FetchworkOrder"])
        members.setdefault(gid, set()).add(f"{ad['ClusterId']}.{ad['ProcId']}")
        scores[gid] = min(scores.get(gid, order), order)
    return members, scores


def test_a_claim_behind_jobs_that_do_not_match_takes_the_one_that_does(broker: Broker) -> None:
    blockers = broker.submit([job(10**6)] * 1000, owner="a")
    [wanted] = broker.submit([job(100)], owner="a")
    claimed = broker.claim(slot(1000))
    assert claimed is not None and f"{claimed['ClusterId']}.{claimed['ProcId']}" == wanted
    assert broker.claim(slot(1000)) is None
    members, scores = index_of(broker)
    assert members == {next(iter(members)): set(blockers)} and len(scores) == 1


def test_the_groups_follow_every_transition(broker: Broker) -> None:
    small = broker.submit([job(100)] * 4, owner="a")
    big = broker.submit([job(5000)] * 3, owner="b")
    assert index_of(broker) == expected_index(broker)
    first = broker.claim(slot(1000))
    assert first is not None
    broker.hold([small[1], big[0]])
    assert index_of(broker) == expected_index(broker)
    broker.release([small[1]])
    broker.remove([big[1]])
    assert index_of(broker) == expected_index(broker)
    assert broker.reject(f"{first['ClusterId']}.{first['ProcId']}", str(first["FetchworkClaim"]))
    second = broker.claim(slot(10000))
    assert second is not None
    assert broker.finish(f"{second['ClusterId']}.{second['ProcId']}",
                         str(second["FetchworkClaim"]), "evict")
    assert index_of(broker) == expected_index(broker)
    while broker.claim(slot(10000)) is not None:
        pass
    assert index_of(broker) == ({}, {})


def test_priority_order_holds_across_groups(broker: Broker) -> None:
    [low] = broker.submit([job(100, JobPrio=0)], owner="a")
    [high] = broker.submit([job(200, JobPrio=5)], owner="a")
    got = broker.claim(slot(1000))
    assert got is not None and f"{got['ClusterId']}.{got['ProcId']}" == high
    got = broker.claim(slot(1000))
    assert got is not None and f"{got['ClusterId']}.{got['ProcId']}" == low


def test_a_start_that_reads_other_attributes_is_checked_job_by_job(broker: Broker) -> None:
    broker.submit([job(100, Cmd="/bin/false")] * 3, owner="a")
    [wanted] = broker.submit([job(100, Cmd="/bin/true")], owner="a")
    got = broker.claim(slot(1000, start='TARGET.Cmd == "/bin/true"'))
    assert got is not None and f"{got['ClusterId']}.{got['ProcId']}" == wanted
    assert broker.claim(slot(1000, start='TARGET.Cmd == "/bin/true"')) is None


def test_idle_jobs_outside_any_group_are_still_claimed(broker: Broker) -> None:
    [job_id] = broker.submit([job(100)], owner="a")
    broker.client.delete(broker.keys.ac_members, broker.keys.ac_groups)  # queued before groups
    got = broker.claim(slot(1000))
    assert got is not None and f"{got['ClusterId']}.{got['ProcId']}" == job_id
