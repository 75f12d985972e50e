"""Local ids for fetched jobs whose ads carry none, so log lines can tell them apart.

A site's fetch hook may hand out a job ad without ClusterId/ProcId (or
GlobalJobId). The startd then names it `local.<n>` (n counts from 1 in this
startd) in the ad's `FetchworkLocalJobId`, which `slotad.job_label` shows,
and says so once in its log.
"""

from __future__ import annotations

import itertools
import logging

import classad2

from .slotad import LOCAL_ID_ATTR, job_id_of

log = logging.getLogger(__name__)

_numbers = itertools.count(1)


def name_if_anonymous(job_ad: classad2.ClassAd | None, slot_label: str) -> str | None:
    """Give `job_ad` a local id when it has no id of its own; the id given, or None."""
    if job_ad is None or job_id_of(job_ad) is not None or LOCAL_ID_ATTR in job_ad:
        return None
    local_id = f"local.{next(_numbers)}"
    job_ad[LOCAL_ID_ATTR] = local_id
    log.warning("%s: the fetched job ad has no ClusterId/ProcId (nor GlobalJobId); "
                "it is job %s in this startd's log (attribute %s)", slot_label, local_id,
                LOCAL_ID_ATTR)
    return local_id
