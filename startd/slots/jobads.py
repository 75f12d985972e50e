"""The ClassAds a startd holds its fetched jobs in: a few, reused job after job.

classad2 keeps about 0.14 KB of every ClassAd it makes, even once it is
freed, so a startd that made one ad per fetched job grew with every job. A
fetched job's values (as the fetch hook's text or an in-process hook's
values give them) are loaded instead into a kept ad (config/keptad.py) that
nothing else holds any more: the ad of a rejected job, or of a claim that
ended. The loop's structures (a claim, a pending claim, the fetch being
read) hold the ads they use; an ad is free again once only this pool holds
it, which CPython's reference count tells exactly. Past `KEPT` ads in use at
once (far more than a startd's slots need), a fetched job gets an ad of its
own, as before.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from fetchwork.config.keptad import KeptAd

# Ads kept for reuse: two per slot (a claim and a fetched job that may preempt it) on
# a large machine, with room to spare.
KEPT = 256
# References to a free ad while `take` looks at it: the pool's list, the loop's
# variable and getrefcount's own argument.
_FREE_REFS = 3


class JobAds:
    """Kept ads for fetched jobs, each reused once nothing outside the pool holds it."""

    def __init__(self) -> None:
        self._ads: list[KeptAd] = []

    def take(self, values: Mapping[str, Any]) -> KeptAd:
        """An ad holding exactly `values` (as ads.parse_values gives them), for the caller
        to keep as long as it likes."""
        for ad in self._ads:
            if sys.getrefcount(ad) <= _FREE_REFS:
                ad.load(values)
                return ad
        ad = KeptAd(values)
        if len(self._ads) < KEPT:
            self._ads.append(ad)
        return ad

    def __len__(self) -> int:
        return len(self._ads)


# The startd's pool: one loop reads every fetch, so one pool per process serves it.
JOB_ADS = JobAds()
