"""The pure decisions on a person's requests: parsing an entry, and who may act."""

from __future__ import annotations

import msgpack
import pytest

from fetchwork.broker.connections.aclpeople import check_name, person_rules, user_name
from fetchwork.broker.trust import requests


def entry(kind: str, **body: object) -> dict[bytes, bytes]:
    return {b"id": b"r1", b"kind": kind.encode(), b"body": msgpack.packb(body)}


def test_a_well_formed_action_parses() -> None:
    request = requests.parse(entry("hold", jobs=["3.0", "3.1"], reason="why",
                                   hold_until=1800000000))
    assert (request.kind, request.jobs, request.reason, request.hold_until) == \
        ("hold", ("3.0", "3.1"), "why", 1800000000)


@pytest.mark.parametrize("fields, why", [
    ({b"kind": b"hold"}, "id must be"),
    ({b"id": b"a b", b"kind": b"hold"}, "id must be"),
    (entry("launch"), "unknown request kind"),
    (entry("hold", jobs=[]), "'hold' needs 'jobs'"),
    (entry("hold", jobs=["3"]), "needs 'jobs'"),
    (entry("hold", jobs=["3.0"], hold_until=True), "hold_until"),
    (entry("remove", jobs=["3.0"], reason=5), "'reason' must be text"),
    (entry("submit", ads=[]), "a submission needs 'ads'"),
    (entry("submit", ads=[{"Cmd": "x"}], cluster=-1), "'cluster' must be"),
    (entry("edit", jobs=["3.0"], attr="Owner", value='"bob"'), "Owner is kept by the broker"),
    (entry("edit", jobs=["3.0"], attr="FetchworkSignature", value='"v1:x"'),
     "kept by the broker"),
    (entry("edit", jobs=["3.0"], attr="Foo"), "'edit' needs 'attr' and 'value'"),
    (entry("edit", jobs=["3.0"], attr="Foo", value=[1]), "'edit' needs 'attr' and 'value'"),
    ({b"id": b"r", b"kind": b"hold", b"body": b"\xc1"}, "not msgpack"),
])
def test_malformed_requests_say_what_is_wrong(fields: dict[bytes, bytes], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        requests.parse(fields)


def test_a_person_may_act_on_its_own_jobs_only() -> None:
    owners = {"1.0": "alice", "2.0": "bob", "3.0": None}
    assert requests.refusal("alice", owners, frozenset(), ["1.0"]) is None
    why = requests.refusal("alice", owners, frozenset(), ["1.0", "2.0"])
    assert why is not None and "2.0 (owner bob)" in why and "QUEUE_SUPER_USERS" in why
    assert requests.refusal("carol", owners, frozenset({"carol"}), ["1.0", "2.0"]) is None
    assert "no such job: 3.0" in (requests.refusal("carol", owners, frozenset({"carol"}),
                                                    ["3.0"]) or "")


def test_super_users_are_read_from_the_knob() -> None:
    assert requests.super_users(" carol, dave  erin,") == {"carol", "dave", "erin"}
    assert requests.super_users(None) == frozenset()


@pytest.mark.parametrize("name", ["", "1abc", "a b", "a*", "a:b", "x" * 65, "a{b}"])
def test_person_names_are_plain_login_names(name: str) -> None:
    with pytest.raises(ValueError, match="person name"):
        check_name(name)


def test_a_persons_writes_are_confined_to_its_namespace() -> None:
    rules = person_rules("p", "alice")
    assert user_name("p", "alice") == "fw-p-u-alice"
    # It reads everything but the transfer manifests and chunk counts (personfiles.py).
    assert [rule for rule in rules if rule.startswith("~")] == [
        "~fw:{p}:[^x]*", "~fw:{p}:xfer:[^cm]*", "~fw:{p}:xfer:chunk:*"]
    assert "-@all" in rules
    writes = [rule for rule in rules if rule.startswith("(")]
    assert writes == ["(~fw:{p}:u:alice:* +xadd +blpop +lpop +del +pexpire +hset +hsetnx "
                      "+hdel)",
                      "(~fw:{p}:doorbell +rpush)"]
    assert not any(rule in rules for rule in ("+hset", "+zadd", "+set", "+incr"))
