"""Queueing a submit description: the one path `fetchwork submit` and the Python
API (`fetchwork.Schedd.submit`) share.

`queue_description` allocates the cluster, has the description parsed for it
(all or nothing, errors naming the line), creates the job event logs and
queues the jobs as one cluster. `await_verdicts` waits for the verdict of
the pool's submission filters on jobs that wait VALIDATING; `waits_for_verdict`
says whether there is one to wait for (a broker service leads the pool: jobs
of a pool that never published its rules wait for one). `max_job_attrs` is
the pool's SUBMIT_MAX_JOB_ATTRS for the parser. None of them prints: the
caller says what happened in its own terms (lines on a terminal, warnings
and exceptions in Python).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.client import Broker
from fetchwork.broker.submission.submitter import Submitted
from fetchwork.errors import SubmitFileError
from fetchwork.submit import transferring, userlogsync
from fetchwork.submit.submitfile import ParsedSubmit

# Longest block on the event stream while waiting for verdicts.
VERDICT_BLOCK_MS = 1000


def max_job_attrs(broker: Broker) -> int:
    """The pool's SUBMIT_MAX_JOB_ATTRS, for the parser to name the line past it; with no
    rules published yet, no limit here (the pool's leader checks each job it admits)."""
    published = broker.pool_rules()
    return published.rules.max_job_attrs if published is not None else sys.maxsize


def leader_running(broker: Broker) -> bool:
    """Whether a broker service leads the pool now (it admits waiting jobs)."""
    return bool(broker.client.exists(broker.keys.leader))


def waits_for_verdict(broker: Broker, submitted: Submitted) -> bool:
    """Whether a verdict on the jobs will come: they wait VALIDATING and a broker
    service leads the pool to give it."""
    return submitted.validating and leader_running(broker)


@dataclass
class Queued:
    """A queued description: its cluster, the submission, the job event logs it
    names (to await) and the job ads as submitted (to_dict form, ProcId order)."""

    cluster: int
    submitted: Submitted
    user_logs: list[str]
    ads: list[dict[str, Any]]


def queue_description(broker: Broker, parse: Callable[[int], ParsedSubmit], owner: str,
                      warn: Callable[[str], None], spool: bool = False,
                      say: Callable[[str], None] | None = None) -> Queued:
    """Queue the jobs `parse(cluster)` makes of a description as one new cluster owned
    by `owner`; each warning of the description goes to `warn` first. A description
    that queues no job is refused (SubmitFileError). Jobs that transfer files send
    their inputs first (transferring.py; `say` hears how much), and with `spool`
    keep their outputs in the pool until fetched."""
    cluster = broker.next_cluster()
    parsed = parse(cluster)
    for warning in parsed.warnings:
        warn(warning)
    if not parsed.ads:
        raise SubmitFileError("the submit description queues no jobs")
    user_logs = userlogsync.create_logs(parsed.ads)
    submitted = transferring.submit_with_inputs(broker, parsed.ads, owner, cluster, spool,
                                                **({"say": say} if say else {}))
    return Queued(cluster, submitted, user_logs, parsed.ads)


def await_verdicts(broker: Broker, job_ids: Sequence[str], since_event: str) -> dict[str, str]:
    """Wait until the submission filters decided every job of `job_ids` (following the
    event stream from `since_event`, taken before the submission); the failed ones
    with their reasons."""
    waiting = list(job_ids)
    failed: dict[str, str] = {}
    while waiting:
        for job, reason in broker.verdicts(waiting).items():
            waiting.remove(job)
            if reason is not None:
                failed[job] = reason
        if waiting:
            for event_id, _fields in broker.events(since_event, block_ms=VERDICT_BLOCK_MS,
                                                   count=1000):
                since_event = event_id
    return failed
