"""The leader's periodic pass over the job policy's PeriodicHold, PeriodicRelease
and PeriodicRemove, every PERIODIC_EXPR_INTERVAL seconds (HTCondor's knob).

Only jobs submitted with such an expression are looked at: submit puts them
in the pool's periodic index (keys.periodic) in the same transaction that
queues them, so a pass reads those jobs' ads, never the whole queue. Each
verdict of `periodic_action` (jobpolicy/expressions.py) is one policy_act.lua call, which
re-checks the job's state; jobs that left the queue leave the index here.
The pass is one of the leader's duties (leader/duty.py): time alone brings
it, never an event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fetchwork.broker.store import READ_BATCH, Store, calls
from fetchwork.broker.store.states import FINISHED, State
from fetchwork.config.ads import from_dict
from fetchwork.errors import AdError

from .expressions import periodic_action

log = logging.getLogger(__name__)


@dataclass
class PeriodicResult:
    """What one pass did: (job id, action) for each job it held, released or removed."""

    acted: list[tuple[str, str]] = field(default_factory=list)
    looked_at: int = 0


def periodic_due(now_s: float, last_pass_s: float | None, interval_s: float) -> bool:
    """Whether a periodic pass is due (always the first time a leader looks)."""
    return last_pass_s is None or now_s - last_pass_s >= interval_s


class PeriodicPolicy:
    """The periodic pass of one pool, run by the leader every `interval_s` seconds."""

    name = "periodic"
    reads_events = False

    def __init__(self, store: Store, interval_s: float):
        self.store = store
        self.interval_s = interval_s
        self._last_pass_s: float | None = None

    def due(self, now_s: float) -> bool:
        return periodic_due(now_s, self._last_pass_s, self.interval_s)

    # -- as a duty of the leader (leader/duty.py) ---------------------------------------

    def on_lead(self, since: str) -> None:
        pass

    def on_lose(self) -> None:
        pass

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> None:
        pass

    def due_in_s(self, now_s: float) -> float:
        if self._last_pass_s is None:
            return 0.0
        return max(0.0, self._last_pass_s + self.interval_s - now_s)

    def run_due(self, now_s: float) -> PeriodicResult:
        return self.run_pass(monotonic_s=now_s)

    def close(self) -> None:
        pass

    def run_pass(self, monotonic_s: float | None = None, now: float | None = None
                 ) -> PeriodicResult:
        """Judge every indexed job once; `now` (epoch s) is the expressions' CurrentTime."""
        self._last_pass_s = time.monotonic() if monotonic_s is None else monotonic_s
        now = time.time() if now is None else now
        result = PeriodicResult()
        key = self.store.keys.periodic
        start = 0
        while True:
            chunk = self.store.ids(self.store.client.zrange(key, start, start + READ_BATCH - 1))
            self._judge(chunk, now, result)
            if len(chunk) < READ_BATCH:
                break
            start += READ_BATCH
        return result

    def _judge(self, chunk: list[str], now: float, result: PeriodicResult) -> None:
        found = dict(self.store.hashes(chunk))
        gone = [job for job in chunk
                if job not in found or found[job].get("FetchworkState") in FINISHED]
        if gone:
            self.store.client.zrem(self.store.keys.periodic, *gone)
        for job in chunk:
            data = found.get(job)
            if data is None or job in gone or data.get("FetchworkState") == State.VALIDATING:
                continue
            result.looked_at += 1
            try:
                action = periodic_action(from_dict(data), now)
            except AdError as exc:
                log.warning("job %s: its periodic expressions cannot be read: %s", job, exc)
                continue
            if action is None:
                continue
            if calls.policy_act(self.store, job_id=job, action=action.kind, reason=action.reason,
                                hold_subcode=action.subcode) is not None:
                log.info("job %s: %s (%s)", job, action.kind, action.reason)
                result.acted.append((job, action.kind))
