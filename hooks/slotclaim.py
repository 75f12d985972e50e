"""What the reference hooks do for partitionable and dynamic slots.

A partitionable slot claims under the name of the dynamic slot the job
will get (`slot1_3@host`, which the startd puts in the p-slot's ad), so the
job's RemoteHost names that slot, as in HTCondor. A dynamic slot ends with
its claim: its published ad is withdrawn rather than shown as unclaimed
(slotads.withdraw).
"""

from __future__ import annotations

import classad2

from fetchwork.config import ads

# The name of the next dynamic slot of a partitionable slot (startd/slots/carving.py writes it).
DYNAMIC_NAME_ATTR = "FetchworkDynamicSlotName"


def claiming_ad(slot_ad: classad2.ClassAd) -> classad2.ClassAd:
    """The slot ad a claim is made with: a p-slot's renamed to its next dynamic slot."""
    dynamic = slot_ad.get(DYNAMIC_NAME_ATTR)
    if slot_ad.get("PartitionableSlot") is not True or not isinstance(dynamic, str) \
            or not dynamic:
        return slot_ad
    renamed = ads.from_dict(ads.to_dict(slot_ad))
    renamed["Name"] = dynamic
    return renamed


def is_dynamic(slot_ad: classad2.ClassAd) -> bool:
    return slot_ad.get("DynamicSlot") is True

