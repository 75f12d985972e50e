"""Event stream entries that name many jobs, read back as one event a job.

A transition script that moves a batch of jobs the same way (submit.lua,
admit_signed.lua) writes one stream entry for them (jobstates.lua
batch_event): its 'jobs' field names them in order as space-separated runs,
"<cluster>.<proc>" or "<cluster>.<first proc>-<last proc>", in place of the
'job' field of an entry for one job. Every reader of the stream goes through
`expand`, so each sees one event a job, under the entry's id, with the
fields an entry for that job alone would have.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping

log = logging.getLogger(__name__)

# The field of a batched entry that names its jobs.
JOBS_FIELD = "jobs"
# The most jobs one entry may name: a script's batch names far fewer; an entry that
# claims more (one written by hand) is not expanded past this.
MAX_JOBS = 100_000

_RUN_RE = re.compile(r"^(\d+)\.(\d+)(?:-(\d+))?$")


def job_ids(text: str) -> Iterator[str]:
    """The job ids a 'jobs' field names, in order; a malformed run is skipped, and no
    more than MAX_JOBS are given."""
    left = MAX_JOBS
    for run in text.split():
        match = _RUN_RE.match(run)
        if match is None:
            continue
        cluster, first = match.group(1), int(match.group(2))
        last = int(match.group(3)) if match.group(3) is not None else first
        for proc in range(first, min(last, first + left - 1) + 1):
            yield f"{cluster}.{proc}"
            left -= 1
        if left <= 0:
            return


def expand(entry_id: str, fields: Mapping[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The events of one stream entry: itself when it names one job, else one a job
    it names (its other fields, and 'job' in place of 'jobs'). An entry whose 'jobs'
    names no job is given as it is (as any entry without a 'job' is), so a reader
    still moves past it."""
    named = fields.get(JOBS_FIELD)
    if named is None:
        return [(entry_id, dict(fields))]
    common = {name: value for name, value in fields.items() if name != JOBS_FIELD}
    out = [(entry_id, {**common, "job": job}) for job in job_ids(named)]
    if not out:
        log.warning("event %s names no job in its %r field: %r", entry_id, JOBS_FIELD, named)
        return [(entry_id, dict(fields))]
    return out


def expand_all(entries: list[tuple[str, dict[str, str]]]) -> list[tuple[str, dict[str, str]]]:
    """`expand` of each entry, in stream order."""
    return [event for entry_id, fields in entries for event in expand(entry_id, fields)]
