"""Random requests from a person's own namespace, written by hand with the person's
credentials (random fields, other people's job ids, malformed values): each is
refused or carried out for that person only, and the leader keeps answering."""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.broker.trust import requests
from tests.broker.trust.test_people import (  # noqa: F401 - the module's fixtures
    POOL,
    admitted,
    folder,
    leader,
    person,
    server,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

KEYS = PoolKeys(POOL)


@pytest.fixture(scope="module")
def jobs(person) -> dict[str, list[str]]:  # noqa: F811
    """Jobs of bob (which alice must never change) and of alice."""
    made = {name: person(name).submit([{"Cmd": "/bin/sleep"}, {"Cmd": "/bin/sleep"}])
            for name in ("alice", "bob")}
    for name, ids in made.items():
        for job in ids:
            wait_until(lambda job=job, name=name: admitted(person(name), job), 20,
                       what=f"{job} admitted")
    return made


def values(job_ids: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                       st.floats(allow_nan=False), st.text(max_size=20),
                       st.binary(max_size=20), job_ids)
    return st.recursive(scalar, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=10), st.sampled_from(
            ["Owner", "Cmd", "Arguments", "FetchworkSignature", "JobStatus", "$expr"])),
            inner, max_size=4)), max_leaves=10)


def bodies(job_ids: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    body = st.fixed_dictionaries({}, optional={
        "jobs": st.one_of(st.lists(job_ids, max_size=4), values(job_ids)),
        "ads": st.one_of(st.lists(st.dictionaries(
            st.sampled_from(["Cmd", "Owner", "owner", "User", "Arguments", "JobPrio",
                             "ClusterId", "FetchworkSignature", "Iwd"]),
            values(job_ids), max_size=4), max_size=3), values(job_ids)),
        "reason": values(job_ids),
        "hold_until": values(job_ids),
        "attr": st.one_of(st.sampled_from(["Arguments", "Owner", "Cmd", "FetchworkSignature",
                                           "1x", "JobStatus", "Foo", "JobPrio"]),
                          values(job_ids)),
        "value": st.one_of(st.sampled_from(['"x"', "1", "Foo +", "", "undefined"]),
                           values(job_ids)),
        "cluster": values(job_ids)})
    return st.one_of(body.map(lambda b: msgpack.packb(b, use_bin_type=True)),
                     st.binary(max_size=40))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_requests_are_refused_or_carried_out_for_that_person_only(
        person, jobs, leader, data) -> None:  # noqa: F811
    alice, bob = person("alice"), person("bob")
    job_ids = st.sampled_from(jobs["bob"] + jobs["alice"] + ["0.0", "99999.0", "1", "x.y"])
    request_id = data.draw(st.one_of(st.just(uuid.uuid4().hex), st.text(max_size=70)),
                           label="id")
    fields = {"id": request_id,
              "kind": data.draw(st.one_of(st.sampled_from(requests.KINDS),
                                          st.text(max_size=10)), label="kind"),
              "body": data.draw(bodies(job_ids), label="body")}
    if data.draw(st.booleans(), label="drop a field"):
        del fields[data.draw(st.sampled_from(sorted(fields)), label="dropped")]
    before = {job: bob.get(job) for job in jobs["bob"]}
    pipe = alice.client.pipeline(transaction=True)
    pipe.xadd(KEYS.requests("alice"), fields)
    pipe.rpush(KEYS.doorbell, "alice")
    pipe.execute()
    wait_until(lambda: alice.client.xlen(KEYS.requests("alice")) == 0, 30,
               what="the leader took the request")
    sent_id = fields.get("id")
    valid_id = (requests.request_id_of({b"id": sent_id.encode()})
                if isinstance(sent_id, str) else None)
    if valid_id is not None:
        raw = alice.client.lpop(KEYS.reply("alice", valid_id))
        assert raw is not None, "every request with a usable id is answered"
        answer = requests.decode_reply(raw)
        assert answer["ok"] or answer["error"]
        for job in answer.get("jobs") or []:
            assert alice.get(job)["Owner"] == "alice", (fields, answer)
    for job, ad in before.items():
        now = bob.get(job)
        assert now is not None
        for name in ("Owner", "Cmd", "Arguments", "JobStatus", "FetchworkSignature"):
            assert now.get(name) == ad.get(name), (job, name, fields)
    assert leader.is_leader


def test_the_leader_still_answers_after_the_fuzz(person, jobs) -> None:  # noqa: F811
    [job] = person("alice").submit([{"Cmd": "/bin/true"}])
    assert person("alice").get(job)["Owner"] == "alice"
