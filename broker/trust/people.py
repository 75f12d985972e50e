"""Who a connection is: a person of the pool, a role, or nobody (no ACL).

A person's Redis user (`fw-<pool>-u-<NAME>`, broker/connections/aclpeople.py)
writes only its own namespace, and the leader carries out each request
written there, taking the name from the key, never from the request. The
client tells a person's connection from a role's by `ACL WHOAMI`
(`person_of`): the credentials decide, never a knob.
"""

from __future__ import annotations

import redis

from fetchwork.broker.connections.aclpeople import NAME_RE


def person_of(client: redis.Redis, pool: str) -> str | None:
    """The person this connection is logged in as in `pool` (its ACL user is
    fw-<pool>-u-<name>), or None for any other user (a role, or no ACL at all)."""
    try:
        who = client.execute_command("ACL", "WHOAMI")
    except redis.ResponseError:
        return None  # a role user may not ask (NOPERM): not a person
    text = who.decode() if isinstance(who, bytes) else str(who)
    prefix = f"fw-{pool}-u-"
    if not text.startswith(prefix):
        return None
    name = text[len(prefix):]
    return name if NAME_RE.match(name) else None


def identity_line(client: redis.Redis, pool: str) -> str:
    """One line for `fetchwork status`: who this connection acts as in the pool."""
    try:
        who = client.execute_command("ACL", "WHOAMI")
    except redis.ResponseError:
        return ("Authenticated with a role's credentials (Redis ACL); people act through "
                "their own users (docs/trust.md).")
    text = who.decode() if isinstance(who, bytes) else str(who)
    if text == "default":
        return ("This pool is unauthenticated: whoever reaches its Redis may act as any user, "
                "and a job's Owner is the submitting login (docs/trust.md sets up people).")
    name = person_of(client, pool)
    if name is not None:
        return (f"Authenticated as {name} (Redis ACL user {text}): the jobs you submit "
                f"are owned by {name}.")
    return f"Authenticated as Redis ACL user {text}."
