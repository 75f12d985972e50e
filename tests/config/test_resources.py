"""An amount of resources, as the startd and the broker's backfill count them."""

from __future__ import annotations

import math

import pytest

from fetchwork.config.resources import Resources

MACHINE = Resources(16, 16000, 1_000_000)


@pytest.mark.parametrize("other", [
    Resources(16, 16000, 1_000_000),
    Resources(1, 0, 0),
    Resources(0, 0, 0),
])
def test_an_amount_covers_what_fits_within_it(other):
    assert MACHINE.covers(other)


@pytest.mark.parametrize("other", [
    Resources(17, 1, 1),
    Resources(1, 16001, 1),
    Resources(1, 1, 1_000_001),
])
def test_one_resource_too_many_is_not_covered(other):
    assert not MACHINE.covers(other)
    assert other.covers(Resources(0, 0, 0))


def test_sums_and_differences_go_resource_by_resource():
    job = Resources(4, 1000, 10)
    assert MACHINE - job == Resources(12, 15000, 999_990)
    assert MACHINE - job + job == MACHINE
    assert not (job - MACHINE).covers(Resources(0, 0, 0))


def test_unbounded_covers_any_amount():
    unbounded = Resources(8.0, 8000.0, math.inf)
    assert unbounded.covers(Resources(8.0, 8000.0, 1e12))
    assert (unbounded - Resources(1.0, 0.0, 1e12)).disk_kb == math.inf


def test_whole_and_fractional_amounts_compare_equal():
    assert Resources(4, 4000, 0) == Resources(4.0, 4000.0, 0.0)
    assert Resources(0.5, 0.0, 0.0).covers(Resources(0.25, 0.0, 0.0))
