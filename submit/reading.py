"""Reading only what a query asks for: jobs named by id straight from their
hashes, the whole queue without building ClassAds, the history newest first
up to a limit. The cost of `q ID`, `history ID` and `submit --wait` depends on
the jobs asked for, not on the size of the queue or the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fetchwork.broker.client import Broker
from fetchwork.broker.store.states import FINISHED
from fetchwork.config.ads import as_bool, evaluate, from_dict, parse_expr
from fetchwork.config.protocol import job_id_key, parse_job_id
from fetchwork.errors import AdError

FINISHED_STATES = frozenset(state.value for state in FINISHED)


def is_finished(data: Any) -> bool:
    """The job has left the queue (completed, removed, failed)."""
    return data.get("FetchworkState") in FINISHED_STATES


def named_ids(broker: Broker, ids: Sequence[str], finished: bool) -> list[str]:
    """Job ids for `C.P` and `C` words: a cluster's jobs in the queue or the history."""
    chosen: dict[str, None] = {}
    for text in ids:
        cluster, proc = parse_job_id(text)
        if proc is None:
            chosen.update(dict.fromkeys(broker.cluster_job_ids(cluster, finished)))
        else:
            chosen[f"{cluster}.{proc}"] = None
    return sorted(chosen, key=job_id_key)


def matching(ads: Sequence[dict[str, Any]], constraint: str | None) -> list[Any]:
    """The ads for which `constraint` is true (ClassAds), or all of them as read."""
    if constraint is None or not constraint.strip():
        return list(ads)
    expr = parse_expr(constraint, source="constraint")
    out = []
    for data in ads:
        try:
            ad = from_dict(data)
        except AdError:
            continue
        if as_bool(evaluate(expr, ad)):
            out.append(ad)
    return out


def queue_jobs(broker: Broker, ids: Sequence[str] = (), constraint: str | None = None,
               fields: Sequence[str] | None = None) -> list[Any]:
    """Jobs in the queue (IDS only, if given) for which `constraint` is true, in id order.
    With `fields` and no constraint, only those attributes are read (plain dicts)."""
    job_ids = named_ids(broker, ids, finished=False) if ids else broker.queued_ids()
    if fields is not None and not (constraint or "").strip():
        rows = broker.job_fields(job_ids, [*fields, "FetchworkState"])
        return sorted((row for row in rows if not is_finished(row)), key=_order)
    ads = [data for data in broker.job_data(job_ids) if not is_finished(data)]
    return sorted(matching(ads, constraint), key=_order)


def history_jobs(broker: Broker, ids: Sequence[str] = (), constraint: str | None = None,
                 limit: int | None = None, fields: Sequence[str] | None = None) -> list[Any]:
    """Finished jobs, newest first: IDS read directly; else the history scanned
    newest first until `limit` jobs match (only `fields`, when given and no constraint)."""
    if ids:
        ads = [data for data in broker.job_data(named_ids(broker, ids, finished=True))
               if is_finished(data)]
        found = matching(ads, constraint)
        found.sort(key=lambda ad: -(ad.get("CompletionDate") or ad.get("EnteredCurrentStatus")
                                    or 0))
        return found[:limit] if limit is not None else found
    if constraint is None or not constraint.strip():
        if fields is not None:
            return broker.job_fields(broker.history_ids(limit), fields)
        return broker.job_data(broker.history_ids(limit))
    return list(broker.history(constraint, limit=limit))


def jobs(broker: Broker, job_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The ads of these jobs wherever they are (queue or history)."""
    return broker.job_data(job_ids)


def _order(ad: Any) -> tuple[int, int]:
    cluster, proc = ad.get("ClusterId"), ad.get("ProcId")
    return (cluster if isinstance(cluster, int) else 0, proc if isinstance(proc, int) else 0)
