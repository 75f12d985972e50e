"""Reading a batch of job ads: each cluster's shared ad read once.

A job of a linked cluster (lua/jobad.lua) keeps only what is its own in its
hash (often just the link); its ad is the cluster hash's attributes it does
not override, its derived ones (ProcId, GlobalJobId, FetchworkOrder), then
its own. read_ads.lua builds that whole ad in Redis for every job, which for
a batch of one cluster's jobs repeats the same concatenation hundreds of
times on the server's one thread. Here read_ads.lua's 'split' mode returns
each job's own hash and each cluster hash once, the queue sequences come
from one ZMSCORE in the same pipeline, and the ads are put together in the
reader's process. The result is the mapping read_ads.lua gives (same
names, values and order), so a caller may use either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
from redis.client import Pipeline

from . import Store, calls

JOB_LINK = "#c"
_GJID, _ORDER = "#gjid", "#order"
# The replies `queue_reads` takes: read_ads.lua's, the queue sequences'.
READS = 2


def queue_reads(pipe: Pipeline, store: Store, job_ids: Sequence[str]) -> int:
    """Queue on `pipe` the reads of the ads of `job_ids` (none for no job); the number
    of replies they take (for `split_ads_of`)."""
    if not job_ids:
        return 0
    calls.read_ads_split_queued(store, pipe, job_ids=job_ids)
    pipe.zmscore(store.keys.queue, list(job_ids))
    return READS


class _Shared:
    """One cluster hash, read: its attributes, and the bookkeeping jobs derive from."""

    def __init__(self, fields: dict[str, Any]):
        self.attrs = {name: value for name, value in fields.items() if name[:1] != "#"}
        gjid = fields.get(_GJID)
        parts = gjid.decode().split("\n", 1) if isinstance(gjid, bytes) else []
        self.gjid = (parts[0], parts[1]) if len(parts) == 2 else None
        order = fields.get(_ORDER)
        self.order = float(order) if isinstance(order, bytes) and order else None


def _number(value: float) -> int | float:
    """A number as cmsgpack packs a Lua number: an integer when it is one."""
    return int(value) if value.is_integer() else value


# The names a linked job's ad derives from its id and its cluster's bookkeeping.
_DERIVED = ("ProcId", "GlobalJobId", "FetchworkOrder")


def split_ads_of(job_ids: Sequence[str], replies: Sequence[Any]
                 ) -> list[tuple[dict[str, Any], tuple[str, ...] | None]]:
    """The ad of each of `job_ids` ({} for a missing job), from the replies of the reads
    `queue_reads` queued for them, each with the names whose values are the job's own
    (its hash's, and those derived from its id); every other attribute of the ad is its
    cluster's shared one, the same value for every job of the cluster read together.
    None for a job whose whole ad is its own (no link to a cluster hash, or missing)."""
    if not job_ids:
        return []
    packed, seqs = replies
    maps = msgpack.unpackb(packed, raw=False)
    count = len(job_ids)
    owns = maps[:count]
    linked = list(dict.fromkeys(job.partition(".")[0] for job, own
                                in zip(job_ids, owns, strict=True) if JOB_LINK in own))
    shared = {cluster: _Shared(fields) for cluster, fields
              in zip(linked, maps[count:], strict=True)}
    ads: list[tuple[dict[str, Any], tuple[str, ...] | None]] = []
    for job, own, seq in zip(job_ids, owns, seqs, strict=True):
        mine = {name: value for name, value in own.items() if name[:1] != "#"}
        if JOB_LINK not in own:
            ads.append((mine, None))
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
        ads.append((ad, (*_DERIVED, *mine) if mine else _DERIVED))
    return ads
