"""The round trips of activation on the claim side.

`first_read` is the full claim's first read of the idle set, pipelined with
what activation keeps for the slot (the filters summary, the slot's
reservation, the lowest blocks) and the leader's backfill reservation,
already judged by read_backfill.lua (none when its job is no longer idle, by
the rule the quiet claim applies), so a pool without filters pays no extra
round trip.
`await_verdict` waits, at most the summary's `wait_ms` plus a little, for the
leader's verdict on a job claim.lua made ACTIVATING; a claim that waited its
longest gives the job back (activate_abandon.lua), unless the verdict
started it meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import classad2
import msgpack
from redis.client import Pipeline
from redis.exceptions import NoScriptError

from fetchwork.broker.filters.gate import BLOCKS_READ, SUMMARY_FIELDS, ClaimView, view_of
from fetchwork.broker.store import Store, calls, codec
from fetchwork.config.ads import to_dict

log = logging.getLogger(__name__)

# Beyond the request's deadline, what a claim allows for the verdict to arrive.
VERDICT_GRACE_S = 0.5
# Longest single BLPOP (well inside a client's socket timeout).
MAX_BLOCK_S = 2.0
NO = b"no"

Rows = list[tuple[bytes, float]]


class ActivationClaims:
    """What a claimer does for activation, on one pool's store."""

    def __init__(self, store: Store):
        self.store = store

    def first_read(self, slot_name: str, batch: int,
                   also: Callable[[Pipeline], None] | None = None
                   ) -> tuple[Rows, ClaimView, list[Any]]:
        """The head of the idle set and the slot's ClaimView, in one round trip (with the
        replies of what `also` adds to it; once more when the server lost its scripts)."""
        keys = self.store.keys
        for attempt in (1, 2):
            pipe = self.store.client.pipeline(transaction=False)
            pipe.zrangebyscore(keys.idle, "-inf", "+inf", start=0, num=batch, withscores=True)
            pipe.hmget(keys.filters, list(SUMMARY_FIELDS))
            pipe.hget(keys.reservations, slot_name)
            pipe.zrange(keys.blocks, 0, BLOCKS_READ - 1, withscores=True)
            calls.read_backfill(self.store, pipe)
            if also is not None:
                also(pipe)
            try:
                rows, summary, reserved, blocks, backfill, *more = pipe.execute()
            except NoScriptError:
                if attempt == 2:
                    raise
                self.store.scripts.forget()
                continue
            return rows, view_of(summary, reserved, blocks, backfill), more
        raise AssertionError("unreachable")

    @staticmethod
    def slot_ad_arg(view: ClaimView, slot: classad2.ClassAd) -> bytes | str:
        """claim.lua's slot-ad argument: the packed ad when some job may need activation."""
        return codec.pack(to_dict(slot)) if view.summary.any_activation else ""

    def await_verdict(self, job_id: str, token: str, wait_ms: int) -> dict[str, Any] | None:
        """The job's ad (stored values) when the leader started it for this claim, else None."""
        keys = self.store.keys
        reply_key = keys.activation_reply(token)
        deadline = time.monotonic() + wait_ms / 1000.0 + VERDICT_GRACE_S
        try:
            while True:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    return self._abandon(job_id, token)
                popped = self.store.client.blpop([reply_key], timeout=min(left_s, MAX_BLOCK_S))
                if popped is not None:
                    return None if popped[1] == NO else _attrs_of(popped[1])
        finally:
            self.store.client.delete(reply_key)

    def _abandon(self, job_id: str, token: str) -> dict[str, Any] | None:
        log.warning("no activation verdict for job %s in time; giving it back", job_id)
        reply = calls.activate_abandon(self.store, job_id=job_id, token=token)
        return None if reply is None else _attrs_of(reply)


def _attrs_of(packed: bytes | str) -> dict[str, Any]:
    job_id, flat = msgpack.unpackb(codec.as_bytes(packed), raw=True)
    log.debug("job %s started after its activation chain", job_id.decode())
    return codec.decode_flat(flat)


def is_activation(reply: Any) -> bool:
    """Whether a claim.lua reply (unpacked) says the job went ACTIVATING."""
    return isinstance(reply, list | tuple) and len(reply) == 2 and reply[1] == b"activate"
