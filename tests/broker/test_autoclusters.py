"""Autoclusters, the pure part: which attributes count, signatures, groups, member keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import classad2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchwork.broker.autoclusters import (
    Grouper,
    group_id,
    signature,
    significant_names,
    start_job_reads,
)
from fetchwork.broker.store.acmembers import member, parse_member
from fetchwork.config.ads import from_dict, parse_ad
from fetchwork.config.matching import matches

EXPR = "$expr"


def job(**attrs: Any) -> dict[str, Any]:
    return {"Cmd": "/bin/true", "Owner": "alice", "RequestMemory": 100, **attrs}


def representative(attrs: dict[str, Any], extra: Sequence[str] = ()) -> dict[str, Any]:
    """The significant attributes of a job, by definition (what Grouper keeps, worked
    out plainly)."""
    by_lower = {name.lower(): name for name in attrs}
    rep = {}
    for name in significant_names(attrs, extra):
        actual = by_lower.get(name.lower())
        if actual is not None:
            rep[actual] = attrs[actual]
    return rep


def start_reads_only(slot: classad2.ClassAd, names: Sequence[str]) -> bool:
    """Whether the slot's START reads no job attribute outside `names`."""
    reads = start_job_reads(slot)
    return reads is not None and reads <= {name.lower() for name in names}


def test_jobs_that_differ_only_in_what_no_match_reads_share_a_group() -> None:
    a = job(Cmd="/bin/true", Arguments="1", ClusterId=1)
    b = job(Cmd="/bin/date", Arguments="2", ClusterId=2)
    assert signature(a) == signature(b)
    assert group_id(signature(a)) == group_id(signature(b))


@pytest.mark.parametrize("name, value", [
    ("RequestMemory", 200), ("RequestCpus", 2), ("RequestDisk", 10), ("Owner", "bob"),
    ("Requirements", {EXPR: "TARGET.Memory > 4"}), ("Rank", {EXPR: "TARGET.Mips"})])
def test_each_significant_attribute_splits_groups(name: str, value: Any) -> None:
    assert group_id(signature(job())) != group_id(signature(job(**{name: value})))


def test_attribute_case_does_not_split_groups() -> None:
    assert signature({"requestmemory": 5, "OWNER": "a"}) == \
        signature({"RequestMemory": 5, "Owner": "a"})


def test_attributes_read_by_requirements_count_through_other_attributes() -> None:
    requirements = {EXPR: "TARGET.Memory >= MY.Need * 2 && Flavour == \"big\""}
    attrs = job(Requirements=requirements, Need={EXPR: "Base + 10"}, Base=5, Flavour="big",
                Unread=1)
    names = {name.lower() for name in significant_names(attrs)}
    assert {"need", "base", "flavour"} <= names
    assert "unread" not in names and "cmd" not in names
    assert signature(attrs) != signature({**attrs, "Base": 6})
    assert signature(attrs) == signature({**attrs, "Unread": 2})


def test_extra_attributes_count_when_the_site_names_them() -> None:
    a, b = job(AccountingGroup="physics"), job(AccountingGroup="chemistry")
    assert signature(a) == signature(b)
    assert signature(a, ["AccountingGroup"]) != signature(b, ["AccountingGroup"])


def test_a_representative_holds_only_significant_attributes() -> None:
    grouper = Grouper()
    gid = grouper.gid(job(Requirements={EXPR: "TARGET.Memory > MY.RequestMemory"},
                          Arguments="x"))
    assert set(grouper.reps[gid]) == {"Owner", "RequestMemory", "Requirements"}


SLOTS = [{"Name": f"slot{n}", "Memory": memory, "Cpus": cpus, "Arch": arch,
          "Start": {EXPR: start}}
         for n, (memory, cpus, arch, start) in enumerate([
             (64, 1, "X86_64", "true"),
             (512, 4, "X86_64", "TARGET.RequestMemory <= 256"),
             (4096, 8, "aarch64", "TARGET.Owner != \"bob\""),
             (4096, 8, "X86_64", "TARGET.RequestCpus < 4 && TARGET.RequestMemory < Memory"),
         ])]

job_strategy = st.builds(
    job,
    RequestMemory=st.sampled_from([50, 100, 300, 1000, 5000]),
    RequestCpus=st.sampled_from([1, 2, 8]),
    Owner=st.sampled_from(["alice", "bob"]),
    Requirements=st.sampled_from([
        {EXPR: "TARGET.Memory >= MY.RequestMemory"},
        {EXPR: "TARGET.Arch == \"X86_64\" && TARGET.Cpus >= RequestCpus"},
        {EXPR: "TARGET.Memory > MY.Need"}, {EXPR: "true"}]),
    Need=st.sampled_from([10, 1000]),
    Arguments=st.text(max_size=3))


@settings(max_examples=150, deadline=None)
@given(st.lists(job_strategy, min_size=1, max_size=12))
def test_a_representative_matches_every_slot_exactly_as_each_member(
        jobs: list[dict[str, Any]]) -> None:
    grouper = Grouper()
    members: dict[str, list[dict[str, Any]]] = {}
    for attrs in jobs:
        members.setdefault(grouper.gid(attrs), []).append(attrs)
    for slot_attrs in SLOTS:
        slot = from_dict(slot_attrs)
        assert start_reads_only(slot, ["RequestMemory", "RequestCpus", "Owner"])
        for gid, grouped in members.items():
            expected = matches(from_dict(grouper.reps[gid]), slot)
            for attrs in grouped:
                assert matches(from_dict(attrs), slot) == expected


@given(st.lists(st.tuples(st.integers(-2**52 + 1, 2**52 - 1), st.integers(0, 10**6)), min_size=2))
def test_member_keys_sort_as_their_orders_and_read_back(
        entries: list[tuple[int, int]]) -> None:
    gid = group_id(signature(job()))
    keys = [member(gid, order, f"{number}.0") for order, number in entries]
    assert [parse_member(key) for key in keys] == [(gid, order, f"{number}.0")
                                                  for order, number in entries]
    by_text = [parse_member(key)[1] for key in sorted(keys)]
    assert by_text == sorted(order for order, _number in entries)


@pytest.mark.parametrize("start, reads_only", [
    (None, True),
    ("TARGET.RequestMemory < Memory", True),
    ("TARGET.Owner != \"bob\" && KeyboardIdle > 5", True),
    ("TARGET.Cmd == \"/bin/true\"", False),
    ("Cmd == \"/bin/true\"", False),   # not the slot's: falls through to the job
    ("MY.Memory > 5", True),
])
def test_start_reads_only_what_the_groups_hold(start: str | None, reads_only: bool) -> None:
    text = 'Name = "s"\nMemory = 10\nKeyboardIdle = 100\n'
    if start is not None:
        text += f"Start = {start}\n"
    assert start_reads_only(parse_ad(text), ["RequestMemory", "Owner"]) is reads_only


@settings(max_examples=100, deadline=None)
@given(st.lists(job_strategy, min_size=1, max_size=20))
def test_a_grouper_gives_the_ids_and_representatives_of_the_pure_functions(
        jobs: list[dict[str, Any]]) -> None:
    grouper = Grouper(["Arguments"])
    for attrs in jobs:
        gid = grouper.gid(attrs)
        assert gid == group_id(signature(attrs, ["Arguments"]))
        assert grouper.reps[gid] == representative(attrs, ["Arguments"])


def test_a_grouper_tells_true_from_one() -> None:
    grouper = Grouper()
    assert grouper.gid(job(RequestCpus=True)) != grouper.gid(job(RequestCpus=1))


@given(st.lists(st.integers(-2**52 + 1, 2**52 - 1), min_size=2))
def test_members_of_an_older_brokers_group_ids_keep_decimal_orders(orders: list[int]) -> None:
    gid = "0123456789abcdef"  # a group id as older brokers wrote it (16 hex digits)
    keys = [member(gid, order, "1.0") for order in orders]
    assert all(len(key.split("|")[1]) == 16 for key in keys)
    assert [parse_member(key)[1] for key in sorted(keys)] == sorted(orders)


def test_members_are_short() -> None:
    gid = group_id(signature(job()))
    assert len(gid) == 11 and "|" not in gid
    assert len(member(gid, 2**52 - 1, "12.345")) == 11 + 1 + 9 + 1 + 6
