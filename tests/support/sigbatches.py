"""A signed job's FetchworkSignature as the claim hands it out: rebuilt from the
job's place in its stored batch (lua/sigbatch.lua), here with the same bytes in
Python (config/signedjob.py proof_text)."""

from __future__ import annotations

from typing import Any

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.config import signedjob

SIG_REF = "#s"


def handed_signature(broker: Broker, job: str) -> str | None:
    """The signature (v3, or v2 for a binary batch) the claim hands out with `job`;
    None when it has no stored batch (a job signed alone keeps its own
    FetchworkSignature)."""
    ref = broker.client.hget(broker.keys.job(job), SIG_REF)
    if ref is None:
        return None
    number, _, index = ref.decode().partition(":")
    blob = broker.client.get(broker.keys.sig_batch(number))
    return None if blob is None else signedjob.proof_text(blob, int(index))


def handed_ad(broker: Broker, job: str) -> dict[str, Any]:
    """`job`'s ad as a claim hands it to an execute machine (its signature included)."""
    ad = dict(broker.get(job) or {})
    signature = handed_signature(broker, job)
    if signature is not None and signedjob.SIGNATURE_ATTR not in ad:
        ad[signedjob.SIGNATURE_ATTR] = signature
    return ad


def settle(leader: FilterLeader) -> None:
    """One leader pass, its duties' work finished."""
    for work in leader.run_pass():
        work.result()
