"""`fetchwork requeue`: the scheduler text's Requeue command.

A running (or suspended) job is stopped: the broker marks it, the execute
side hears of it at its next lease renewal and vacates it, and the job goes
back to IDLE at the head of its priority group whatever its Rerunnable says.
A job that is not running is left as it is, and the command says so. Job
selection follows rm, hold and release (`C.P`, clusters `C`, `-constraint`,
`-all`).
"""

from __future__ import annotations

import click

from fetchwork.submit.options import CondorCommand
from fetchwork.submit.usercli import select_jobs


@click.command("requeue", cls=CondorCommand)
@click.argument("ids", nargs=-1)
@click.option("-constraint", "--constraint", "constraint", metavar="EXPR",
              help="Only jobs for which this ClassAd expression is true.")
@click.option("-all", "--all", "all_jobs", is_flag=True, help="Every job in the queue.")
def requeue_command(ids: tuple[str, ...], constraint: str | None, all_jobs: bool) -> None:
    """Stop running jobs and put them back in the queue: IDS are C.P or whole
    clusters C; or -constraint, -all.

    Each running job is vacated on its slot and becomes idle again at the head
    of its priority group, so it runs next (Rerunnable = false does not keep it
    from being requeued). An idle, held or blocked job is unchanged.
    """
    broker, selected = select_jobs(ids, constraint, all_jobs)
    done = set(broker.requeue(selected))
    states = {f"{row['ClusterId']}.{row['ProcId']}": row["FetchworkState"]
              for row in broker.job_fields(selected, ["ProcId", "FetchworkState"])}
    for job in selected:
        if job in done:
            click.echo(f"Job {job} requeued: it is stopped and will run again.")
        else:
            state = str(states.get(job) or "gone").lower()
            click.echo(f"Job {job} is {state}, not running; unchanged.")
