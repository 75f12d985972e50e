"""`fetchwork wait` fetches the outputs of jobs that end while it waits: a job's
files are written into its initialdir as the log shows it terminated. The pool
is reached only when a job ends, so a wait on a log alone needs no pool."""

from __future__ import annotations

import logging

import click

from fetchwork.broker.client import Broker
from fetchwork.errors import FetchworkError


class OutputsAsJobsEnd:
    """Fetches the waiting outputs of each job it is told ended, once."""

    def __init__(self) -> None:
        self.broker: Broker | None = None
        self.fetched: set[str] = set()
        self.unreachable = False

    def ended(self, job_id: str) -> None:
        if self.unreachable or job_id in self.fetched:
            return
        from fetchwork.submit import transfercli  # the pool only when a job ended

        try:
            if self.broker is None:
                self.broker = Broker.from_config(start=False)
            self.fetched |= transfercli.fetch_ended(self.broker, [job_id], self.fetched)
        except FetchworkError as exc:
            logging.getLogger(__name__).info("outputs not fetched: %s", exc)
            click.echo(f"fetchwork: outputs not fetched ({exc}); use fetchwork transfer-data",
                       err=True)
            self.unreachable = True
