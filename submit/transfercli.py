"""The submit side of file transfer: a submission's inputs sent with it (all or
nothing), `fetchwork transfer-data` (condor_transfer_data), the outputs `wait`
and `submit -wait` fetch as jobs end, and what `q` says of outputs not fetched."""

from __future__ import annotations

import getpass
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import click

from fetchwork.broker.client import Broker
from fetchwork.config.ads import to_dict
from fetchwork.config.protocol import job_id_key, parse_job_id
from fetchwork.errors import BrokerError, FetchworkError, TransferError
from fetchwork.submit.options import CondorCommand
from fetchwork.submit.usercli import connect_broker
from fetchwork.transfer import delivery, personupload, stored
from fetchwork.transfer.inputs import transfers

log = logging.getLogger(__name__)


def jobs_named(broker: Broker, ids: Sequence[str]) -> list[str]:
    """Queued and finished jobs named by `ids` (C.P, or C for a whole cluster)."""
    found: list[str] = []
    for text in ids:
        cluster, proc = parse_job_id(text)
        if proc is None:
            found += broker.cluster_job_ids(cluster) + broker.cluster_job_ids(cluster,
                                                                              finished=True)
        else:
            found.append(f"{cluster}.{proc}")
    return sorted(dict.fromkeys(found), key=job_id_key)


def fetch_outputs(broker: Broker, job_ids: Iterable[str], quiet: bool = False) -> int:
    """Deliver the waiting outputs of `job_ids` into their Iwd; the number of failures."""
    failed = 0
    for job_id in job_ids:
        ad = broker.get(job_id)
        if ad is None:
            if not quiet:
                click.echo(f"Job {job_id} is not in the pool.", err=True)
                failed += 1
            continue
        data = to_dict(ad)
        person = broker.person()
        try:
            if person is not None:  # through the leader, for the person's own jobs only
                done = personupload.deliver(broker, person, job_id, data)
            else:
                done = delivery.deliver(broker.store, job_id, data)
        except (TransferError, BrokerError) as exc:
            click.echo(f"Job {job_id}: outputs not delivered: {exc}", err=True)
            failed += 1
            continue
        if done is not None:
            click.echo(f"Job {job_id}: {done.files} output file(s) written into "
                       f"{data.get('Iwd')}.")
        elif not quiet:
            if person is not None:  # the leader may have settled them (expired) just now
                data = to_dict(broker.get(job_id) or ad)
            click.echo(f"Job {job_id}: {_no_outputs(data)}.")
    return failed


def fetch_ended(broker: Broker, ended: Iterable[str], fetched: set[str]) -> set[str]:
    """`wait` and `submit -wait`: deliver the outputs of the jobs of `ended` not yet in
    `fetched` (jobs without waiting outputs are passed over quietly); those jobs."""
    new = [job for job in ended if job not in fetched]
    if not new:
        return set()
    waiting = stored.waiting_outputs(broker.store)
    fetch_outputs(broker, sorted((job for job in new if job in waiting), key=job_id_key),
                  quiet=True)
    return set(new)


def _no_outputs(data: dict[str, Any]) -> str:
    settled = data.get(delivery.OUTPUTS_ATTR)
    if settled == delivery.DELIVERED:
        return "its outputs were already delivered"
    if settled == delivery.EXPIRED:
        return "its outputs expired unfetched"
    if not transfers(data):
        return "it transfers no files"
    return "it has returned no outputs (yet)"


@click.command("transfer-data", cls=CondorCommand)
@click.argument("ids", nargs=-1)
@click.option("-all", "--all", "all_jobs", is_flag=True,
              help="Every job of yours whose outputs wait in the pool.")
def transfer_data_command(ids: tuple[str, ...], all_jobs: bool) -> None:
    """Fetch the outputs of jobs submitted with -spool (condor_transfer_data): IDS are
    C.P or whole clusters C, or -all. Each job's files are written into its
    initialdir, as you; a job whose outputs were already delivered is said so."""
    if bool(ids) == all_jobs:
        raise click.UsageError("name jobs (C.P), clusters (C), or -all")
    broker = connect_broker()
    person = broker.person()
    if person is None:  # a person may not settle outputs itself
        delivery.expire_due(broker.store)
    if all_jobs:
        me = person.name if person is not None else getpass.getuser()
        chosen = [job for job in sorted(stored.waiting_outputs(broker.store), key=job_id_key)
                  if (broker.job_fields([job], ["Owner"]) or [{}])[0].get("Owner") == me]
        if not chosen:
            click.echo("No job of yours has outputs waiting in the pool.")
            return
    else:
        chosen = jobs_named(broker, ids)
        if not chosen:
            raise FetchworkError("no matching jobs")
    if fetch_outputs(broker, chosen):
        raise SystemExit(1)
