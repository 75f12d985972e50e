"""Calling the broker through a short outage: retry with backoff, then give up clearly.

The reference exit and evict hooks must not drop what they report because
Redis was away for a moment (restarting, failing over, a network blip): a
dropped completion lets the job's lease lapse and the job run again. They
retry for FETCHWORK_REPORT_RETRY_TIME seconds, waiting `_FIRST_DELAY_S`,
then twice as long each time up to `_MAX_DELAY_S`; the lease keeper goes on
renewing meanwhile. Errors that are not about reaching Redis are not retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis

from fetchwork.errors import FetchworkError, RedisUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

_FIRST_DELAY_S = 0.1
_MAX_DELAY_S = 2.0
# What a call to an unreachable, restarting or loading Redis raises.
TRANSIENT = (RedisUnavailableError, redis.ConnectionError, redis.TimeoutError)


def delays_s(budget_s: float) -> list[float]:
    """The waits between attempts within `budget_s` seconds (pure)."""
    waits: list[float] = []
    delay_s, total_s = _FIRST_DELAY_S, 0.0
    while total_s + delay_s <= budget_s:
        waits.append(delay_s)
        total_s += delay_s
        delay_s = min(delay_s * 2.0, _MAX_DELAY_S)
    return waits


def through_outage(call: Callable[[], T], what: str, budget_s: float,
                   sleep: Callable[[float], None] = time.sleep) -> T:
    """`call()`, retried while Redis cannot be reached, for at most `budget_s` seconds;
    then a RedisUnavailableError saying what was not done."""
    waits = delays_s(budget_s)
    for attempt in range(len(waits) + 1):
        try:
            return call()
        except TRANSIENT as exc:
            if attempt == len(waits):
                raise RedisUnavailableError(
                    f"{what}: the broker's Redis could not be reached for {budget_s:g}s "
                    f"({exc})") from exc
            if attempt == 0:
                log.warning("%s: the broker's Redis cannot be reached (%s); retrying", what, exc)
            sleep(waits[attempt])
    raise AssertionError("unreachable")  # pragma: no cover


def quietly(call: Callable[[], object], what: str) -> None:
    """`call()` for something merely advisory (a slot ad shown to `fetchwork status`):
    a failure is logged, never raised."""
    try:
        call()
    except (FetchworkError, redis.RedisError) as exc:
        log.info("%s skipped: %s", what, exc)
