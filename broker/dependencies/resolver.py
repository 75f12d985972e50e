"""Dependencies at the broker: registered at submit, resolved by the leader.

A submitted job whose ad names `Depends` (full job ids) is checked against
the queue (broker/dependencies/graph.py refuses a missing job or a cycle),
starts BLOCKED (or HELD) with `FetchworkWaitingOn`, and is indexed in the
same MULTI that queues it: the depwait set holds every waiting job and
`dependents:<C.P>` the jobs that wait on C.P. The leader's resolver reads
the event stream: when a job finishes it decides only that job's dependents
(and a newly submitted waiting job at once), with depend.lua; it never scans
the whole queue. A sweep over the depwait set (when leadership is taken and
every DEPENDENCY_SWEEP_INTERVAL) catches anything the stream no longer holds,
or that came before the lead was taken. The resolver is one of the leader's
duties (leader/duty.py): the leader's reader hands it the events.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from fetchwork.broker.store import Store, calls, codec
from fetchwork.broker.store.jobads import PreparedJob
from fetchwork.broker.store.states import FINISHED, JOB_STATUS, WAITING_ATTR, State
from fetchwork.config.protocol import job_id_key

from .graph import (
    DEPENDS_ATTR,
    DepState,
    Verdict,
    blocked_reason,
    check_submission,
    decide,
    id_list,
    parse_depends,
)

log = logging.getLogger(__name__)

BATCH = 500
# The served resolver sweeps at most this often, whatever DEPENDENCY_SWEEP_INTERVAL says.
MIN_SWEEP_INTERVAL_S = 1.0
_FINISHED_NAMES = frozenset(state.value for state in FINISHED)
_DEP_FIELDS = ("FetchworkState", "ExitCode", "RemoveReason")


# -- at submit ----------------------------------------------------------------

def plan_dependencies(store: Store, cluster: int, jobs: Sequence[PreparedJob]) -> int:
    """Check the dependencies of a submission to `cluster` (DependencyError when one is
    missing or they form a cycle) and make each dependent job wait: `Depends` as full
    ids, FetchworkWaitingOn, BLOCKED with a BlockedReason unless it is HELD.
    Returns how many jobs wait."""
    graph: dict[str, list[str]] = {}
    for job in jobs:
        name = _depends_name(job.attrs)
        if name is None:
            continue
        deps = parse_depends(job.attrs.pop(name))
        if deps:
            job.attrs[DEPENDS_ATTR] = id_list(deps)
            graph[job.job_id] = deps
    if not graph:
        return 0
    outside = sorted({dep for deps in graph.values() for dep in deps
                      if job_id_key(dep)[0] != cluster}, key=job_id_key)
    existing = {dep: _dep_state(values)
                for dep, values in zip(outside, store.fields(outside, _DEP_FIELDS), strict=True)}
    check_submission(graph, cluster, {job.job_id for job in jobs}, existing)
    for job in jobs:
        if job.job_id not in graph:
            continue
        deps = graph[job.job_id]
        job.attrs[WAITING_ATTR] = id_list(deps)
        job.attrs["BlockedReason"] = blocked_reason(deps)  # also for a release of a HELD one
        if job.attrs["FetchworkState"] != State.HELD:
            job.attrs["FetchworkState"] = State.BLOCKED.value
            job.attrs["JobStatus"] = int(JOB_STATUS[State.BLOCKED])
    return len(graph)


def _depends_name(attrs: dict[str, Any]) -> str | None:
    """How `attrs` spells Depends, if it has it (a cheap test: submissions are big)."""
    if DEPENDS_ATTR in attrs:
        return DEPENDS_ATTR
    size, lower = len(DEPENDS_ATTR), DEPENDS_ATTR.lower()
    return next((n for n in attrs if len(n) == size and n.lower() == lower), None)


def waits(job: PreparedJob) -> bool:
    """Whether new job `job` waits for dependencies (`register_waiting` indexes it)."""
    return bool(job.attrs.get(WAITING_ATTR))


def register_waiting(pipe: redis.client.Pipeline, store: Store,
                     jobs: Iterable[PreparedJob]) -> None:
    """Index the waiting jobs among `jobs` in `pipe` (the MULTI that queues them)."""
    for job in jobs:
        if not waits(job):
            continue
        pipe.sadd(store.keys.dep_waiting, job.job_id)
        for dep in parse_depends(job.attrs[WAITING_ATTR]):
            pipe.sadd(store.keys.dependents(dep), job.job_id)


def _dep_state(values: Sequence[Any]) -> DepState | None:
    state = values[0]
    return DepState(state, values[1], values[2]) if isinstance(state, str) else None


# -- the leader's resolver ------------------------------------------------------

class DependencyResolver:
    """Decides waiting jobs when their dependencies finish (see the module text)."""

    name = "dependencies"
    reads_events = True

    def __init__(self, store: Store, sweep_interval_s: float | None = None):
        self.store = store
        # None: sweep only when leadership is taken.
        self.sweep_interval_s = sweep_interval_s
        self._last_sweep_s: float | None = None

    # -- as a duty of the leader (leader/duty.py): `on_events` below, a sweep when due --

    def on_lead(self, since: str) -> None:
        """A sweep at once: what finished before `since` is not handed over."""
        self._last_sweep_s = None

    def on_lose(self) -> None:
        pass

    def due_in_s(self, now_s: float) -> float:
        if self._last_sweep_s is None:
            return 0.0
        if self.sweep_interval_s is None:
            return math.inf
        interval_s = max(MIN_SWEEP_INTERVAL_S, self.sweep_interval_s)
        return max(0.0, self._last_sweep_s + interval_s - now_s)

    def run_due(self, now_s: float) -> int:
        return self.sweep_if_due(now_s)

    def close(self) -> None:
        pass

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> int:
        """Decide the jobs that wait on jobs these events finished, and newly submitted
        waiting jobs. Returns how many jobs changed."""
        finished = [fields["job"] for _id, fields in events
                    if fields.get("state") in _FINISHED_NAMES and "job" in fields]
        submitted = [fields["job"] for _id, fields in events
                     if fields.get("type") == "submit" and "job" in fields]
        keys = self.store.keys
        client = self.store.client
        if not (finished or submitted) or not client.scard(keys.dep_waiting):
            return 0
        pipe = client.pipeline(transaction=False)
        for job in finished:
            pipe.smembers(keys.dependents(job))
        if submitted:
            pipe.smismember(keys.dep_waiting, submitted)
        if finished:  # a finished job waits on nothing any more
            pipe.srem(keys.dep_waiting, *finished)
        replies = pipe.execute()
        if finished:
            replies.pop()
        candidates = [codec.text(member) for reply in replies[:len(finished)]
                      for member in reply]
        if submitted:
            candidates += [job for job, member in zip(submitted, replies[-1], strict=True)
                           if member]
        changed = self.settle(candidates)
        if finished:
            client.delete(*[keys.dependents(job) for job in finished])
        return changed

    def sweep_if_due(self, now_s: float, took_lead: bool = False) -> int:
        """Sweep every waiting job when leadership was just taken or the interval passed."""
        interval_s = self.sweep_interval_s
        if not (took_lead or self._last_sweep_s is None
                or (interval_s is not None and now_s - self._last_sweep_s >= interval_s)):
            return 0
        self._last_sweep_s = now_s
        return self.sweep()

    def sweep(self) -> int:
        """Decide every job in the depwait set; how many changed."""
        ids = self.store.ids(self.store.client.sscan_iter(self.store.keys.dep_waiting,
                                                          count=1000))
        return self.settle(ids)

    def settle(self, job_ids: Sequence[str]) -> int:
        """Decide `job_ids` from their dependencies' states and apply it with depend.lua."""
        ids = list(dict.fromkeys(job_ids))
        changed = 0
        for start in range(0, len(ids), BATCH):
            changed += self._settle_batch(ids[start:start + BATCH])
        if changed:
            log.info("dependencies: %d waiting job(s) decided", changed)
        return changed

    def _settle_batch(self, ids: list[str]) -> int:
        rows = list(self.store.fields(ids, ["FetchworkState", WAITING_ATTR]))
        waiting = {job: parse_depends(row[1]) for job, row in zip(ids, rows, strict=True)
                   if isinstance(row[1], str) and row[1]}
        deps = sorted({dep for left in waiting.values() for dep in left}, key=job_id_key)
        states = {dep: _dep_state(values)
                  for dep, values in zip(deps, self.store.fields(deps, _DEP_FIELDS), strict=True)}
        items: list[list[Any]] = []
        for job in ids:
            left = waiting.get(job)
            if left is None:  # no longer waiting: it only leaves the depwait set
                items.append([job, Verdict.WAIT.value, "", ""])
                continue
            decision = decide(left, states)
            if decision.verdict is Verdict.WAIT and list(decision.waiting_on) == left:
                continue
            items.append([job, decision.verdict.value, id_list(decision.waiting_on),
                          decision.reason])
        store = self.store
        changed = 0
        if items:
            changed = calls.depend(store, items=items)
        # The jobs waiting on a finished job are decided (above, or when they were
        # submitted after its end event): its index of dependents is done with.
        ended = [dep for dep, known in states.items()
                 if known is None or known.state in _FINISHED_NAMES]
        if ended:
            store.client.delete(*[store.keys.dependents(dep) for dep in ended])
        return changed
