"""`fetchwork qedit`: condor_qedit, the change of job attributes in the queue.

`fetchwork qedit 12.0 JobPrio 5`, `fetchwork qedit 12 Tag '"x"' Level 3`,
`fetchwork qedit -constraint 'Owner == "ann"' JobPrio 2`: as condor_qedit
reads its words, the leading job ids (`C.P`) and clusters (`C`) name the
jobs, and the rest are attribute and value pairs, each value a ClassAd
expression (`'"text"'` for a string). Attributes a user may not change
(HTCondor's immutable ones, and every one only the broker writes) are refused
before anything changes (broker/store/editable.py). The Python API's
`Schedd.edit` takes the same path: `Broker.select`, then `Broker.edit`.
"""

from __future__ import annotations

import re

import click

from fetchwork.errors import FetchworkError
from fetchwork.submit.options import CondorCommand
from fetchwork.submit.usercli import select_jobs

_ID_RE = re.compile(r"\d+(\.\d+)?\Z")


def split_words(words: tuple[str, ...]) -> tuple[list[str], list[tuple[str, str]]]:
    """(job ids, attribute/value pairs) of qedit's words, as condor_qedit reads them."""
    ids: list[str] = []
    rest = list(words)
    while rest and _ID_RE.match(rest[0].strip()):
        ids.append(rest.pop(0).strip())
    if not rest or len(rest) % 2:
        raise click.UsageError("give ATTR VALUE pairs after the job ids "
                               "(e.g. `fetchwork qedit 12.0 JobPrio 5`)")
    return ids, [(rest[index], rest[index + 1]) for index in range(0, len(rest), 2)]


@click.command("qedit", cls=CondorCommand)
@click.argument("words", nargs=-1, required=True)
@click.option("-constraint", "--constraint", "constraint", metavar="EXPR",
              help="Only jobs for which this ClassAd expression is true.")
@click.option("-all", "--all", "all_jobs", is_flag=True, help="Every job in the queue.")
def qedit_command(words: tuple[str, ...], constraint: str | None, all_jobs: bool) -> None:
    """Change attributes of queued jobs: [IDS] ATTR VALUE [ATTR VALUE ...].

    IDS are C.P or whole clusters C (or -constraint EXPR, -all); each VALUE is
    a ClassAd expression, so a string is quoted: '"text"'. Owner, ClusterId,
    ProcId, JobStatus and the other attributes fetchwork keeps itself are
    refused; hold, release, rm and requeue change a job's state.
    """
    ids, pairs = split_words(words)
    broker, selected = select_jobs(ids, constraint, all_jobs)
    for attr, value in pairs:
        # Each pair is checked before the first changes anything.
        broker.edit([], attr, value)
    for attr, value in pairs:
        edited = broker.edit(selected, attr, value)
        if not edited:
            raise FetchworkError(f"no matching job could be edited (finished, or waiting "
                                 f"for the submission filters): {attr} unchanged")
        click.echo(f'Set attribute "{attr}" for {len(edited)} matching job(s).')
