"""A person's side of the requests: send one to the leader and wait for its answer.

Used by the client API (broker/client.py) when its connection is a person's
(people.person_of): submissions and actions then go through the leader
instead of the transition scripts, which a person may not run. A request is
one XADD to the person's own stream and one RPUSH of the name on the pool's
doorbell, in one transaction; the answer is taken with BLPOP from the
person's reply list. A refusal becomes a BrokerError carrying the leader's
reason, so nothing is reported done that was not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.errors import BrokerError

from . import requests

# How long a client waits for the leader's answer before it gives up (the request
# itself stays queued and is carried out when a leader reads it).
ANSWER_WAIT_S = 120.0


class PersonClient:
    """Sends requests as person `name` of one pool."""

    def __init__(self, client: redis.Redis, pool: str, name: str,
                 wait_s: float = ANSWER_WAIT_S):
        self.client = client
        self.keys = PoolKeys(pool)
        self.name = name
        self.wait_s = wait_s

    def ask(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request and return the leader's answer (BrokerError when refused)."""
        request_id = uuid.uuid4().hex
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(self.keys.requests(self.name),
                  {"id": request_id, "kind": kind, "body": requests.encode(kind, body)})
        pipe.rpush(self.keys.doorbell, self.name)
        pipe.execute()
        reply_key = self.keys.reply(self.name, request_id)
        deadline = time.monotonic() + self.wait_s
        while True:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise BrokerError(
                    f"the pool's leader did not answer {kind} request {request_id} within "
                    f"{self.wait_s:g}s: is `fetchwork broker` running? The request stays "
                    "queued and is carried out when a leader reads it")
            popped = self.client.blpop([reply_key], timeout=min(left_s, 5.0))
            if popped is not None:
                break
        raw = popped[1]
        answer = requests.decode_reply(raw if isinstance(raw, bytes) else raw.encode())
        if not answer.get("ok"):
            raise BrokerError(str(answer.get("error") or f"{kind} refused by the leader"))
        return answer

    def next_cluster(self) -> int:
        """A cluster number for this person's next submission, from the leader."""
        cluster = self.ask("cluster", {}).get("cluster")
        if not isinstance(cluster, int):
            raise BrokerError("the leader's answer holds no cluster number")
        return cluster

    def submit(self, ads: Sequence[Mapping[str, Any]],
               cluster: int | None = None) -> tuple[list[str], bool]:
        """Queue `ads` as one cluster owned by this person (in `cluster` when
        next_cluster gave it): (job ids, validating)."""
        body: dict[str, Any] = {"ads": [dict(ad) for ad in ads]}
        if cluster is not None:
            body["cluster"] = cluster
        answer = self.ask("submit", body)
        return [str(job) for job in answer.get("jobs", [])], bool(answer.get("validating"))

    def act(self, kind: str, jobs: Sequence[str], reason: str | None = None,
            hold_until: int | None = None) -> list[str]:
        """Remove, hold, release or requeue `jobs`: the ones changed."""
        body: dict[str, Any] = {"jobs": list(jobs)}
        if reason is not None:
            body["reason"] = reason
        if hold_until is not None:
            body["hold_until"] = int(hold_until)
        return [str(job) for job in self.ask(kind, body).get("jobs", [])]

    def edit(self, jobs: Sequence[str], attr: str, value: str) -> list[str]:
        """condor_qedit of `jobs`: `attr` set to ClassAd expression text `value`; the
        jobs edited."""
        body = {"jobs": list(jobs), "attr": attr, "value": value}
        return [str(job) for job in self.ask("edit", body).get("jobs", [])]
