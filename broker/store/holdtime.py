"""Holds with a time: DEFAULT_HOLD_DURATION's range and `hold --for/--until` (pure).

A job's `HoldUntil` is epoch seconds; the leader releases a held job by
itself once it passes. `--for SECONDS` counts from now; `--until TIME` takes
local time (`2026-12-01 08:00`) or any ISO 8601 form, with or without an
offset. Every function takes `now` instead of reading the clock.
"""

from __future__ import annotations

import datetime as dt

from fetchwork.config.convert import to_duration_s
from fetchwork.errors import ConfigError, HoldTimeError

# Windows HPC's bounds for Default Hold Duration: one minute to one week.
HOLD_DURATION_MIN_S = 60
HOLD_DURATION_MAX_S = 604800


def check_default_hold_s(value_s: float, source: str | None = None,
                         line: int | None = None) -> int:
    """DEFAULT_HOLD_DURATION as whole seconds; ConfigError outside 60..604800."""
    if not HOLD_DURATION_MIN_S <= value_s <= HOLD_DURATION_MAX_S:
        raise ConfigError(f"DEFAULT_HOLD_DURATION = {value_s:g} is outside "
                          f"{HOLD_DURATION_MIN_S}..{HOLD_DURATION_MAX_S} seconds",
                          source, line)
    return int(value_s)


def hold_for(text: str, now_s: float) -> int:
    """HoldUntil for `--for TEXT`: seconds (or a duration such as 90s, 10m, 2h) from now."""
    try:
        seconds = to_duration_s(text)
    except ValueError as exc:
        raise HoldTimeError(f"--for {text!r}: {exc}") from exc
    if seconds <= 0:
        raise HoldTimeError(f"--for {text!r}: the hold must last more than 0 seconds")
    return int(now_s + seconds + 0.999999)


def hold_until(text: str, now_s: float, tz: dt.tzinfo | None = None) -> int:
    """HoldUntil for `--until TEXT`: local time (`tz`, default this machine's zone)
    unless the text carries an offset; the time must lie ahead of `now_s`."""
    cleaned = text.strip()
    if cleaned.endswith(("Z", "z")):
        cleaned = cleaned[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(cleaned)
    except ValueError as exc:
        raise HoldTimeError(f"--until {text!r} is not a time: use \"2026-12-01 08:00\" "
                            "(local time) or ISO 8601") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz) if tz is not None else when.astimezone()
    epoch_s = when.timestamp()
    if epoch_s <= now_s:
        raise HoldTimeError(f"--until {text!r} is in the past")
    return int(epoch_s + 0.999999)


def format_hold_until(epoch_s: float, tz: dt.tzinfo | None = None) -> str:
    """`2026-12-01 08:00:00` in local time (or `tz`), for tables."""
    return dt.datetime.fromtimestamp(epoch_s, tz).strftime("%Y-%m-%d %H:%M:%S")
