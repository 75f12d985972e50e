"""The pool's rules as published: their fields, their digest, and the decisions on a
job ad that the leader's admission and the submit command take from them."""

from __future__ import annotations

from dataclasses import replace

from fetchwork.broker.filters.gate import Summary
from fetchwork.broker.leader.publish import pool_rules
from fetchwork.broker.store import poolrules
from fetchwork.broker.store.poolrules import Published
from fetchwork.config.loader import Config

DEFAULTS = pool_rules(Config.load(environ={}), Summary())


def PoolRules(**changes: object) -> poolrules.PoolRules:  # noqa: N802 - reads as the type
    """The rules of defaults.conf, with `changes`."""
    return replace(DEFAULTS, **changes)  # type: ignore[arg-type]


def test_the_fields_read_back_as_the_same_rules():
    rules = PoolRules(filtered=True, max_walltime_s=100, default_walltime_s=30.5, limits=True,
                      max_job_attrs=7, events_maxlen=50, default_lease_s=60,
                      default_exclusive=True)
    raw = {name.encode(): value.encode() for name, value in rules.fields().items()}
    raw.update({b"version": b"3", b"published_by": b"host:1", b"published_at": b"12.5"})
    assert poolrules.from_fields(raw) == Published(rules, 3, "host:1", 12.5)


def test_booleans_and_whole_numbers_are_plain_text():
    fields = PoolRules(max_walltime_s=100.0, limits=False, default_exclusive=True).fields()
    assert fields["max_walltime_s"] == "100" and fields["limits"] == ""
    assert fields["default_exclusive"] == "1"
    assert fields["blocked_reason"] == poolrules.WAITING_REASON


def test_nothing_published_is_none():
    assert poolrules.from_fields({}) is None
    # A claim's pass counter, a half-written hash or a rule missing is not a publication.
    assert poolrules.from_fields({b"max_walltime_s": b"100"}) is None
    partial = {name.encode(): value.encode() for name, value in PoolRules().fields().items()
               if name != "max_job_attrs"}
    assert poolrules.from_fields({**partial, b"version": b"1"}) is None
    assert poolrules.from_fields({b"version": b"2", b"max_walltime_s": b"lots"}) is None


def test_the_digest_tells_a_change_apart_from_a_republication():
    assert PoolRules().digest() == PoolRules().digest()
    assert PoolRules(max_walltime_s=100).digest() != PoolRules().digest()


def test_max_walltime_refuses_naming_the_pools_knob_and_the_numbers():
    rules = PoolRules(max_walltime_s=100)
    assert poolrules.refusal({"allowedjobduration": 5000}, rules) == (
        "the job asks for 5000 s of wall-clock time (AllowedJobDuration), more than the "
        "pool's MAX_WALLTIME = 100 s")
    assert poolrules.refusal({"AllowedJobDuration": 100}, rules) is None
    assert poolrules.refusal({"AllowedJobDuration": 5000}, PoolRules()) is None


def test_a_job_without_a_walltime_is_judged_by_the_pools_default():
    rules = PoolRules(max_walltime_s=60, default_walltime_s=3600)
    assert "3600 s of wall-clock time (the pool's DEFAULT_JOB_WALLTIME)" in (
        poolrules.refusal({"Cmd": "x"}, rules) or "")
    # Not a positive number (an expression, a boolean, 0): the default applies too.
    for value in ({"$expr": "60 * 60"}, True, 0, -5):
        assert poolrules.walltime_s({"AllowedJobDuration": value}, rules) == (3600, False)


def test_the_attribute_cap_counts_what_the_submitter_wrote():
    rules = PoolRules(max_job_attrs=2)
    managed = {"ClusterId": 1, "ProcId": 0, "Owner": "a", "JobPrio": 0, "QDate": 1,
               "FetchworkState": "IDLE", "JobLeaseDuration": 60, "#c": ""}
    assert poolrules.counted_attrs({**managed, "Cmd": "x", "Args": "y"}) == 2
    assert poolrules.refusal({**managed, "Cmd": "x", "Args": "y"}, rules) is None
    assert poolrules.refusal({**managed, "Cmd": "x", "Args": "y", "Env": ""}, rules) == (
        "the job has 3 attributes, more than the pool's SUBMIT_MAX_JOB_ATTRS = 2")


def test_every_rule_names_its_knobs():
    assert set(poolrules.KNOBS) == {name for name in PoolRules().fields()
                                    if name != "blocked_reason"}
