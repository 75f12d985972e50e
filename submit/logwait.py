"""condor_wait's decision over a job event log, event by event (pure).

The jobs watched are those the log says were submitted (000), all of them or
only those of one cluster or one job; a job ends with 005 (terminated) or
009 (aborted). The wait is over when every watched job has ended, or, with
`num`, when that many have. A log that names no watched job fails.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

SUBMIT, EXECUTE, TERMINATED, ABORTED = 0, 1, 5, 9


class Outcome(enum.Enum):
    """How a wait ends: done (exit status 0) or not (1)."""

    ALL_DONE = "All jobs done."
    NUM_DONE = "Specified number of jobs ({num}) done."
    NO_JOBS = "This log does not mention any jobs!"
    NO_SUCH_JOB = "This log does not mention that job!"
    TIME_EXPIRED = "Time expired."

    @property
    def ok(self) -> bool:
        return self in (Outcome.ALL_DONE, Outcome.NUM_DONE)


@dataclass
class LogWait:
    """What the events of a log so far say about the jobs waited for."""

    cluster: int | None = None
    proc: int | None = None
    num: int | None = None
    watching: set[tuple[int, int]] = field(default_factory=set)
    submitted: int = 0
    ended: int = 0

    def matches(self, cluster: int, proc: int) -> bool:
        return ((self.cluster is None or cluster == self.cluster)
                and (self.proc is None or proc == self.proc))

    def see(self, code: int, cluster: int, proc: int, host: str = "") -> str | None:
        """Take one event in; a status line (`C.P.0 submitted`, ...) for `-status`;
        `host` is an execute event's."""
        if not self.matches(cluster, proc):
            return None
        key = f"{cluster}.{proc}.0"
        if code == SUBMIT:
            self.watching.add((cluster, proc))
            self.submitted += 1
            return f"{key} submitted"
        if code == EXECUTE:
            return f"{key} executing on host {host}"
        if code in (TERMINATED, ABORTED):
            self.watching.discard((cluster, proc))
            self.ended += 1
            return f"{key} {'completed' if code == TERMINATED else 'aborted'}"
        return None

    def outcome(self, scanned: bool) -> Outcome | None:
        """The end of the wait, or None to wait on; `scanned`: the events the log held
        when the wait began have all been seen."""
        if self.num is not None and self.ended >= self.num:
            return Outcome.NUM_DONE
        if not scanned:
            return None
        if self.submitted == 0:
            return Outcome.NO_JOBS if self.cluster is None else Outcome.NO_SUCH_JOB
        return Outcome.ALL_DONE if self.num is None and not self.watching else None

    def message(self, outcome: Outcome) -> str:
        return outcome.value.format(num=self.num)
