"""The broker's bulk reads against a real Redis: whole ads (read_ads.lua), a
few attributes (read_fields.lua), ids in one reply (read_ids.lua), a cluster's
jobs, the newest of the history."""

from __future__ import annotations

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker(redis_client: redis.Redis, pool_name: str) -> Broker:
    return Broker(redis_client, pool_name, Config.load(environ={}))


def test_whole_ads_keep_every_kind_of_name_and_value(broker: Broker) -> None:
    long_name = "A" * 40 + "_" * 300
    ad = {"Cmd": "/bin/true", "Iwd": "/tmp", long_name: "x" * 70000, "Ratio": 0.25,
          "Flag": False, "Req": {"$expr": "TARGET.Memory > 1"}, "Uni": "caf\u00e9",
          **{f"Extra{n}": n for n in range(40)}}
    (job,) = broker.submit([ad], owner="ann")
    (data,) = broker.job_data([job, "999.0"])
    assert data[long_name] == "x" * 70000 and data["Ratio"] == 0.25 and data["Flag"] is False
    assert data["Req"] == {"$expr": "TARGET.Memory > 1"} and data["Uni"] == "caf\u00e9"
    assert data["Extra39"] == 39 and data["Owner"] == "ann"
    assert broker.get(job)["Extra7"] == 7


def test_fields_of_many_jobs(broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * 2500, owner="ann")
    rows = broker.job_fields([*ids, "999.0"], ["ProcId", "Owner", "Nothing"])
    assert len(rows) == 2500
    assert rows[2499] == {"ClusterId": int(ids[0].split(".")[0]), "ProcId": 2499,
                          "Owner": "ann", "Nothing": None}


def test_ids_of_queue_cluster_and_history(broker: Broker) -> None:
    first = broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * 3)
    second = broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp"}] * 2)
    assert broker.queued_ids() == first + second
    cluster = int(second[0].split(".")[0])
    assert broker.cluster_job_ids(cluster) == second
    broker.remove([first[1], second[0]])
    assert broker.cluster_job_ids(cluster, finished=True) == [second[0]]
    assert sorted(broker.history_ids()) == sorted([first[1], second[0]])
    assert len(broker.history_ids(limit=1)) == 1 and broker.history_ids(limit=0) == []
