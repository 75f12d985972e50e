"""A person's requests to the leader: their wire form and the pure decisions on them.

A person writes one entry per request to its stream `fw:{P}:u:<name>:requests`
(fields `id`, `kind`, `body`: msgpack) and rings the doorbell; the leader
(desk.py) carries it out and answers on `fw:{P}:u:<name>:reply:<id>` with one
msgpack map: `ok`, and `error` (why it was refused: nothing was done), or
`jobs` (the jobs a submission queued, or the jobs an action changed) and
`validating` (and `cluster`). Kinds: `cluster` (a cluster number for a
submission to come: the submit file's $(Cluster)), `submit` (body: `ads`, a
list of job ads as to_dict maps, and `cluster` when one was given out),
`remove`, `hold`, `release`, `requeue` (body: `jobs`, `reason`,
`hold_until`), `edit` (body: `jobs`, `attr`, `value`: condor_qedit's
attribute and ClassAd expression text), `outputs` and `delivered` (body:
`jobs`: hand out the manifests of their waiting outputs, settle them as
delivered: personfiles.py).

Everything here is a function of its inputs: `parse` turns an entry into a
`Request` or says why it cannot be one; `refusal` decides, from the jobs'
owners, whether the person may act on them. A request naming one job the
person may not touch is refused whole, so nothing is half-done.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from fetchwork.broker.store.states import is_managed
from fetchwork.config.signedjob import SIGNATURE_ATTR

# A job id, cluster.proc.
JOB_ID_RE = re.compile(r"[0-9]{1,18}\.[0-9]{1,9}\Z")
ACTIONS = ("remove", "hold", "release", "requeue")
# `outputs`, `delivered`: a job's transferred outputs handed to their owner, settled
# (personfiles.py).
KINDS: tuple[str, ...] = ("cluster", "submit", *ACTIONS, "edit", "outputs", "delivered")
# Bounds on one request (a bigger submission is several requests).
MAX_JOBS = 100_000
MAX_REASON = 1024
MAX_VALUE = 65_536


@dataclass(frozen=True)
class Request:
    """One request of one person, as the leader carries it out."""

    request_id: str
    kind: str
    jobs: tuple[str, ...] = ()
    ads: tuple[Mapping[str, Any], ...] = ()
    cluster: int | None = None
    reason: str | None = None
    hold_until: int | None = None
    attr: str = ""
    value: str = ""


def encode(kind: str, body: Mapping[str, Any]) -> bytes:
    return msgpack.packb(dict(body), use_bin_type=True)


def decode_reply(raw: bytes) -> dict[str, Any]:
    reply = msgpack.unpackb(raw, raw=False)
    if not isinstance(reply, dict):
        raise ValueError("the leader's reply is not a map")
    return reply


def encode_reply(ok: bool, error: str | None = None, jobs: Sequence[str] = (),
                 validating: bool = False, cluster: int | None = None) -> bytes:
    return msgpack.packb({"ok": ok, "error": error, "jobs": list(jobs),
                          "validating": validating, "cluster": cluster}, use_bin_type=True)


def _text(fields: Mapping[bytes, bytes], name: str) -> str:
    raw = fields.get(name.encode())
    if raw is None:
        raise ValueError(f"the request has no field {name!r}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"field {name!r} is not UTF-8") from exc


def request_id_of(fields: Mapping[bytes, bytes]) -> str | None:
    """The entry's request id when it is a usable one (the reply key's last part)."""
    raw = fields.get(b"id")
    if not isinstance(raw, bytes) or not 0 < len(raw) <= 64:
        return None
    text = raw.decode("ascii", "replace")
    return text if all(ch.isalnum() or ch in "-_" for ch in text) else None


def parse(fields: Mapping[bytes, bytes]) -> Request:
    """The request in a stream entry; ValueError saying what is wrong with it."""
    request_id = request_id_of(fields)
    if request_id is None:
        raise ValueError("the request's id must be 1-64 letters, digits, '-' or '_'")
    kind = _text(fields, "kind")
    if kind not in KINDS:
        raise ValueError(f"unknown request kind {kind!r} (kinds: {', '.join(KINDS)})")
    try:
        body = msgpack.unpackb(fields.get(b"body", b"\x80"), raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ValueError(f"the request's body is not msgpack: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError("the request's body must be a map")
    if kind == "cluster":
        return Request(request_id, kind)
    if kind == "submit":
        cluster = body.get("cluster")
        if cluster is not None and (isinstance(cluster, bool) or not isinstance(cluster, int)
                                    or cluster <= 0):
            raise ValueError("'cluster' must be a cluster number the leader gave out")
        ads = body.get("ads")
        if not isinstance(ads, list) or not ads or len(ads) > MAX_JOBS:
            raise ValueError(f"a submission needs 'ads': a list of 1 to {MAX_JOBS} job ads")
        if not all(isinstance(ad, dict) and all(isinstance(k, str) for k in ad) for ad in ads):
            raise ValueError("each job ad must be a map of attribute names to values")
        return Request(request_id, kind, ads=tuple(ads), cluster=cluster)
    jobs = body.get("jobs")
    if (not isinstance(jobs, list) or not jobs or len(jobs) > MAX_JOBS
            or not all(isinstance(job, str) and JOB_ID_RE.match(job) for job in jobs)):
        raise ValueError(f"'{kind}' needs 'jobs': a list of 1 to {MAX_JOBS} job ids "
                         "(cluster.proc)")
    if kind == "edit":
        attr, value = body.get("attr"), body.get("value")
        if not isinstance(attr, str) or not isinstance(value, str) or len(value) > MAX_VALUE:
            raise ValueError(f"'edit' needs 'attr' and 'value': an attribute name and "
                             f"ClassAd expression text of at most {MAX_VALUE} characters")
        if attr.lower() == SIGNATURE_ATTR.lower() or is_managed(attr):
            raise ValueError(f"{attr} is kept by the broker and cannot be edited")
        return Request(request_id, kind, jobs=tuple(jobs), attr=attr, value=value)
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise ValueError(f"'reason' must be text of at most {MAX_REASON} characters")
    until = body.get("hold_until")
    if until is not None and (isinstance(until, bool) or not isinstance(until, int)
                              or until < 0):
        raise ValueError("'hold_until' must be a time in seconds since the epoch")
    return Request(request_id, kind, jobs=tuple(jobs), reason=reason, hold_until=until)


def refusal(person: str, owners: Mapping[str, str | None], super_users: frozenset[str],
            jobs: Sequence[str]) -> str | None:
    """Why `person` may not act on `jobs` (their `owners`, None for a job that does not
    exist), or None when it may act on all of them."""
    missing = [job for job in jobs if owners.get(job) is None]
    if missing:
        return f"no such job: {', '.join(missing[:10])}"
    if person in super_users:
        return None
    foreign = [job for job in jobs if owners[job] != person]
    if foreign:
        shown = ", ".join(f"{job} (owner {owners[job]})" for job in foreign[:10])
        return (f"{person} may act only on its own jobs, not on {shown}; "
                "QUEUE_SUPER_USERS names who may act on anyone's")
    return None


def super_users(text: str | None) -> frozenset[str]:
    """QUEUE_SUPER_USERS: names separated by spaces or commas."""
    return frozenset(word for word in (text or "").replace(",", " ").split() if word)
