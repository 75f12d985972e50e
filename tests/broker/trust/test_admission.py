"""Signed admission on a real Redis: the leader signs what it admits, in batches, and
refuses a job the broker staged itself (a person's) whose signed attributes changed
while it waited, or a job whose hash names another job."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher, pool_rules
from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, parse_ad
from fetchwork.config.loader import Config


@pytest.fixture
def signing(tmp_path: Path, redis_client: redis.Redis, pool_name: str):
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    signer = Signer((tmp_path / "k.pem").read_bytes(), "k.pem")
    config = Config.load(environ={})
    broker = Broker(redis_client, pool_name, config)
    leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                          sign=signer.signature)
    # The pool's rules, published as the leader does: with a signer, everything waits.
    store = broker.store
    RulesPublisher(store, pool_rules(config, leader.summary()), leader.summary(),
                   "tests").publish()
    yield broker, leader, signedjob.read_public_key((tmp_path / "p.pem").read_bytes(), "p")
    leader.close()


def settle(leader: FilterLeader) -> None:
    for work in leader.run_pass():
        work.result()


def state(broker: Broker, job: str) -> str:
    return str(broker.get(job)["FetchworkState"])


def test_every_job_waits_and_is_signed_when_admitted(signing) -> None:
    broker, leader, public = signing
    jobs = broker.submit([{"Cmd": "/bin/true", "Arguments": str(n)} for n in range(1200)],
                         owner="alice")
    assert {state(broker, job) for job in jobs[:3]} == {"VALIDATING"}
    settle(leader)
    assert {state(broker, job) for job in jobs} == {"IDLE"}
    for job in (jobs[0], jobs[-1]):
        assert signedjob.check(public, parse_ad(format_ad(broker.get(job)))) is None


def test_a_job_the_broker_staged_and_someone_changed_is_refused(signing) -> None:
    broker, leader, public = signing
    broker.sign_submissions(leader.sign)  # as the leader's own client, for a person
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 3, owner="alice")  # one cluster ad
    broker.client.hset(broker.keys.job(jobs[1]), "Cmd", msgpack.packb("/bin/evil"))
    settle(leader)
    assert [state(broker, job) for job in jobs] == ["IDLE", "FAILED", "IDLE"]
    assert "signed attributes changed" in broker.get(jobs[1])["RemoveReason"]


def test_a_job_whose_hash_names_another_job_is_refused(signing) -> None:
    broker, leader, _public = signing
    [job] = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    broker.client.hset(broker.keys.job(job), "ProcId", msgpack.packb(7))
    settle(leader)
    assert state(broker, job) == "FAILED"
    assert "do not name job" in broker.get(job)["RemoveReason"]


def test_signed_admission_survives_a_server_that_lost_its_scripts(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 3, owner="alice")
    settle(leader)  # loads admit_signed.lua
    more = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    broker.client.script_flush()  # as a restarted server would have
    settle(leader)
    assert {state(broker, job) for job in jobs + more} == {"IDLE"}
