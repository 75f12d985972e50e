"""Typed values from configuration text: small pure converters.

Each takes the expanded text of a knob and returns a typed value or raises
`ValueError` with a message that says what was expected; `Config` adds the
file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import classad2

_TRUE = {"true", "yes", "on", "1", "t", "y"}
_FALSE = {"false", "no", "off", "0", "f", "n"}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", re.I)
_DURATION_UNITS_S = {
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 0.001, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0, "w": 604800.0, "week": 604800.0,
    "weeks": 604800.0,
}


def _evaluate_literal(text: str) -> object:
    """Evaluate `text` as a constant ClassAd expression (HTCondor allows `4 * 1024`)."""
    try:
        value = classad2.ExprTree(text).eval()
    except Exception as exc:  # classad2 raises its own exception type
        raise ValueError(f"{text!r} is not a valid expression") from exc
    if isinstance(value, classad2.Value):  # undefined or error (an IntEnum: check first)
        raise ValueError(f"{text!r} does not evaluate to a value ({value.name})")
    return value


def _number(text: str, parse: Callable[[str], float], expected: str) -> float:
    """`parse(text)`, else `text` as a constant expression that gives a number."""
    try:
        return parse(text)
    except ValueError:
        pass
    try:
        value = _evaluate_literal(text) if text else None
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected {expected}, got {text!r}")
    return value


def to_int(text: str) -> int:
    """`42`, `-3`, `0x10`, or a constant expression such as `4 * 1024`."""
    text = text.strip()
    value = _number(text, lambda digits: int(digits, 0), "an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"expected an integer, got {text!r} (= {value})")
    return int(value)


def to_float(text: str) -> float:
    """`1.5`, `2`, `1e3`, or a constant expression."""
    return float(_number(text.strip(), float, "a number"))


def to_bool(text: str) -> bool:
    """`true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`, `t`/`f` in any case."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    try:
        value = _evaluate_literal(text) if word else None
    except ValueError:
        value = None
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {text!r}")


def to_duration_s(text: str) -> float:
    """Seconds from `90`, `90s`, `1.5m`, `2h`, `1d`, `1h30m`, `500ms` (no unit: seconds)."""
    remaining = text.strip()
    if not remaining:
        raise ValueError("expected a duration such as 30, 30s, 5m or 2h, got nothing")
    total = 0.0
    position = 0
    while position < len(remaining):
        match = _DURATION_RE.match(remaining, position)
        if not match or match.group(2).lower() not in _DURATION_UNITS_S:
            raise ValueError(f"expected a duration such as 30, 30s, 5m or 2h, got {text!r}")
        total += float(match.group(1)) * _DURATION_UNITS_S[match.group(2).lower()]
        position = match.end()
        while position < len(remaining) and remaining[position].isspace():
            position += 1
    return total


def to_expr(text: str) -> classad2.ExprTree:
    """A ClassAd expression, parsed (not evaluated)."""
    text = text.strip()
    if not text:
        raise ValueError("expected a ClassAd expression, got nothing")
    try:
        return classad2.ExprTree(text)
    except Exception as exc:
        raise ValueError(f"{text!r} is not a valid ClassAd expression") from exc


def to_list(text: str) -> list[str]:
    """Items separated by commas and/or whitespace, as HTCondor lists are."""
    return [item for item in re.split(r"[\s,]+", text.strip()) if item]
