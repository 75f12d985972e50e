"""Reading a batch of job ads with plain reads: each cluster's shared ad once.

A job of a linked cluster (lua/jobad.lua) keeps only what is its own in its
hash (often just the link); its ad is the cluster hash's attributes it does
not override, its derived ones (ProcId, GlobalJobId, FetchworkOrder), then
its own. read_ads.lua builds that whole ad in Redis for every job, which for
a batch of one cluster's jobs repeats the same concatenation hundreds of
times on the server's one thread. Here one pipeline reads each job's own
hash, each cluster hash of the batch once and the jobs' queue sequences; the
ads are put together in the reader's process, each cluster's values decoded
once. The result is the mapping read_ads.lua gives (same names, values and
order), so a caller may use either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.client import Pipeline

from . import Store, codec

JOB_LINK = b"#c"
_BOOKKEEPING = ord("#")
_GJID, _ORDER = b"#gjid", b"#order"
DERIVED = ("ProcId", "GlobalJobId", "FetchworkOrder")


def _clusters(job_ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(job.partition(".")[0] for job in job_ids))


def reads_of(job_ids: Sequence[str]) -> int:
    """How many replies `queue_reads` takes for `job_ids`."""
    if not job_ids:
        return 0
    return len(job_ids) + len(_clusters(job_ids)) + 1


def queue_reads(pipe: Pipeline, store: Store, job_ids: Sequence[str]) -> int:
    """Queue on `pipe` the reads of the ads of `job_ids`; the number of replies they
    take (for `ads_of`)."""
    if not job_ids:
        return 0
    for job in job_ids:
        pipe.hgetall(store.keys.job(job))
    clusters = _clusters(job_ids)
    for cluster in clusters:
        pipe.hgetall(store.keys.cluster(cluster))
    pipe.zmscore(store.keys.queue, list(job_ids))
    return len(job_ids) + len(clusters) + 1


class _Shared:
    """One cluster hash, read: its attributes decoded, its bookkeeping kept raw."""

    def __init__(self, raw: dict[bytes, bytes]):
        self.attrs = {name.decode(): codec.unpack(value) for name, value in raw.items()
                      if name[0] != _BOOKKEEPING}
        gjid = raw.get(_GJID)
        self.gjid = gjid.decode().split("\n", 1) if gjid is not None else None
        if self.gjid is not None and len(self.gjid) != 2:
            self.gjid = None
        order = raw.get(_ORDER)
        self.order = float(order) if order is not None else None


def _number(value: float) -> int | float:
    """A number as cmsgpack packs a Lua number: an integer when it is one."""
    return int(value) if value.is_integer() else value


def ads_of(job_ids: Sequence[str], replies: Sequence[Any]) -> list[dict[str, Any]]:
    """The ad of each of `job_ids` ({} for a missing job), from the replies of the reads
    `queue_reads` queued for them."""
    count = len(job_ids)
    if not count:
        return []
    clusters = _clusters(job_ids)
    shared = {cluster: _Shared(raw) for cluster, raw
              in zip(clusters, replies[count:count + len(clusters)], strict=True)}
    seqs = replies[count + len(clusters)]
    ads: list[dict[str, Any]] = []
    for job, own, seq in zip(job_ids, replies[:count], seqs, strict=True):
        if not own:
            ads.append({})
            continue
        mine = {name.decode(): codec.unpack(value) for name, value in own.items()
                if name[0] != _BOOKKEEPING}
        if JOB_LINK not in own:
            ads.append(mine)
            continue
        cluster, _, proc = job.partition(".")
        base = shared[cluster]
        ad = {name: value for name, value in base.attrs.items() if name not in mine} \
            if mine else dict(base.attrs)
        if "ProcId" not in mine:
            ad["ProcId"] = int(proc)
        if "GlobalJobId" not in mine and base.gjid is not None:
            ad["GlobalJobId"] = f"{base.gjid[0]}{job}{base.gjid[1]}"
        if "FetchworkOrder" not in mine and base.order is not None and seq is not None:
            ad["FetchworkOrder"] = _number(base.order + float(seq))
        ad.update(mine)
        ads.append(ad)
    return ads
