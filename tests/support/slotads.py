"""A slot ad as one new ClassAd, for tests (the startd keeps one ad per slot and
changes it in place: startd/slots/slotadcache.py)."""

from __future__ import annotations

import classad2

from fetchwork.startd.slots.slotad import ClaimView, MachineFacts, SlotPolicy, slot_ad_attrs
from fetchwork.startd.states import SlotStatus


def build_slot_ad(slot_id: int, startd_name: str, num_slots: int, facts: MachineFacts,
                  status: SlotStatus, policy: SlotPolicy, now: float,
                  claim: ClaimView | None = None) -> classad2.ClassAd:
    """`slot_ad_attrs` as a new ClassAd."""
    ad = classad2.ClassAd()
    for name, value in slot_ad_attrs(slot_id, startd_name, num_slots, facts, status, policy,
                                     now, claim).items():
        ad[name] = value
    return ad
