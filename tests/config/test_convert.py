"""Typed converters: pure functions from knob text to values."""

from __future__ import annotations

import classad2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fetchwork.config import convert


@pytest.mark.parametrize("text,expected", [("42", 42), (" -3 ", -3), ("0x10", 16),
                                           ("4 * 1024", 4096), ("10 * 60", 600)])
def test_to_int(text, expected):
    assert convert.to_int(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.5", "true", "1 +"])
def test_to_int_rejects(text):
    with pytest.raises(ValueError):
        convert.to_int(text)


@pytest.mark.parametrize("text,expected", [("1.5", 1.5), ("2", 2.0), ("1e3", 1000.0),
                                           ("3 / 2.0", 1.5)])
def test_to_float(text, expected):
    assert convert.to_float(text) == expected


@pytest.mark.parametrize("text,expected", [("true", True), ("FALSE", False), ("Yes", True),
                                           ("off", False), ("1", True), ("0", False),
                                           ("1 == 1", True)])
def test_to_bool(text, expected):
    assert convert.to_bool(text) is expected


@pytest.mark.parametrize("text", ["maybe", "", "2"])
def test_to_bool_rejects(text):
    with pytest.raises(ValueError):
        convert.to_bool(text)


@pytest.mark.parametrize("text,expected", [("90", 90), ("90s", 90), ("1.5m", 90), ("2h", 7200),
                                           ("1d", 86400), ("1h30m", 5400), ("500ms", 0.5),
                                           ("1 h 30 m", 5400)])
def test_to_duration_s(text, expected):
    assert convert.to_duration_s(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "soon", "5 parsecs", "-3"])
def test_to_duration_rejects(text):
    with pytest.raises(ValueError, match="duration"):
        convert.to_duration_s(text)


@given(st.integers(min_value=0, max_value=10**9))
def test_durations_without_unit_are_seconds(seconds):
    assert convert.to_duration_s(str(seconds)) == seconds


def test_to_expr_parses_without_evaluating():
    expr = convert.to_expr('ifThenElse(State == "Claimed", 0, 300)')
    assert isinstance(expr, classad2.ExprTree)
    assert expr.eval(classad2.ClassAd({"State": "Claimed"})) == 0


def test_to_expr_rejects_garbage():
    with pytest.raises(ValueError, match="not a valid ClassAd expression"):
        convert.to_expr("1 +")


def test_to_list_splits_on_commas_and_space():
    assert convert.to_list("a, b  c,,d") == ["a", "b", "c", "d"]
