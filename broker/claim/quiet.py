"""The quiet claim: the common case of a claim in one round trip (claim.lua, '*groups').

A pool with no activation filters and no slot sorting window (the quiet
view) needs no job read before its claim: the claimer keeps, per slot ad,
which autoclusters match the slot (their representative decides for every
job), which cannot, and which need each job judged, and claim.lua claims
the head of the best matching autocluster with idle jobs, in the idle set's
priority order. The leader's backfill reservation does not stop it when
that head is at or before the reserved job in the idle order (such a job
always may start), nor once the reserved job has left the idle set: with
jobs queued behind busy slots the reservation is usually on the very head
the claim takes. claim.lua answers with the autoclusters the claimer has
not judged yet when it meets one (the claimer judges them and asks again),
and hands anything else to the full claim (broker/claim/claimer.py): activation,
reservations, blocks, a head after the reserved job, jobs to judge one by
one, a head the checks hold back.
"""

from __future__ import annotations

import hashlib
import threading
import uuid

import classad2
import msgpack

from fetchwork.broker.store import Store, codec
from fetchwork.config.ads import from_dict

from .index import GroupIndex

# Slot ads whose autocluster verdicts the claimer keeps, by a digest of their text
# (cleared when full): a few MB at most, in a startd too.
SLOTS_KEPT = 4096
# Rounds of judging newly met autoclusters before the full claim takes over.
JUDGING_ROUNDS = 4


class SlotVerdicts:
    """One slot ad's autoclusters, by verdict, as claim.lua takes them."""

    def __init__(self) -> None:
        self.matching: list[str] = []
        self.refusing: list[str] = []
        self.judged: list[str] = []
        self.args: list[str] = ["", "", ""]

    def learn(self, verdicts: list[tuple[str, bool, bool]]) -> None:
        for gid, alone, fits in verdicts:
            (self.matching if fits and alone else self.judged if fits
             else self.refusing).append(gid)
        self.args = [" ".join(self.matching), " ".join(self.refusing), " ".join(self.judged)]


class QuietClaim:
    """The one-call claim of one claimer."""

    def __init__(self, store: Store, groups: GroupIndex, default_lease_s: float):
        self.store = store
        self.groups = groups
        self.default_lease_s = default_lease_s
        self._slots: dict[bytes, SlotVerdicts] = {}
        # The autoclusters claim.lua last named (best first): a new slot ad judges
        # them before its first call, which then usually needs no second one.
        self._named: list[str] = []
        self._lock = threading.Lock()

    def claim(self, slot: classad2.ClassAd, name: str) -> tuple[bool, classad2.ClassAd | None]:
        """(whether the quiet claim decided, the job claimed); not decided: the full
        claim must."""
        verdicts = self._verdicts(slot)
        if not any(verdicts.args) and self._named:
            fresh = self.groups.judge(slot, self._named)
            with self._lock:
                verdicts.learn(fresh)
        keys = self.store.keys
        for _round in range(JUDGING_ROUNDS):
            token = uuid.uuid4().hex
            reply = self.store.run(
                "claim", [], [token, name, str(self.default_lease_s), "", "*groups",
                              keys.job(""), *verdicts.args],
                extra_keys=[keys.activation(token), keys.ps_ledger, keys.backfill])
            if reply == b"none":
                return True, None
            if not isinstance(reply, list):
                return False, None
            if reply[0] == b"job":
                _job_id, flat = msgpack.unpackb(reply[1], raw=True)
                return True, from_dict(codec.decode_flat(flat))
            unknown = self._named = [codec.text(gid) for gid in reply[1:]]
            known = set(verdicts.matching) | set(verdicts.refusing) | set(verdicts.judged)
            fresh = self.groups.judge(slot, [gid for gid in unknown if gid not in known])
            if not fresh:
                return False, None
            with self._lock:
                verdicts.learn(fresh)
        return False, None

    def _verdicts(self, slot: classad2.ClassAd) -> SlotVerdicts:
        text = hashlib.blake2b(str(slot).encode(), digest_size=16).digest()
        with self._lock:
            verdicts = self._slots.get(text)
            if verdicts is None:
                if len(self._slots) >= SLOTS_KEPT:
                    self._slots.clear()
                verdicts = self._slots[text] = SlotVerdicts()
            return verdicts
