"""People: one Redis ACL user per person, and the namespace that user may write.

`fetchwork acl user NAME` makes the user `fw-<pool>-u-<NAME>`. It may read
every key of the pool (`fetchwork q` and `history` read everything, as
before) and write only, through ACL selectors, its own namespace
`fw:{P}:u:<NAME>:*` (requests.py:
the request stream and the replies) and push onto the pool's doorbell list,
which tells the leader whose stream to read. It runs no transition script:
the leader carries out each request, so whatever lands in that namespace was
written by that person, and the leader takes the name from the key, never
from what the request says. The client tells a person's connection from a
role's by `ACL WHOAMI` (`person_of`): the credentials decide, not a knob.
"""

from __future__ import annotations

import re

import redis

from fetchwork.broker.connections.acl import COMMON, password_rule, pool_pattern
from fetchwork.broker.store.keys import PoolKeys
from fetchwork.broker.store.scripts import sha

# A person's name: what a login name may be (POSIX portable characters), so it is
# literal in ACL key patterns and in key names.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
# The read-only scripts `q` and `history` run.
READERS = ("read_ads", "read_fields", "read_ids")
# What a person does in its own namespace: send a request, take its reply.
OWN_COMMANDS = ("xadd", "blpop", "lpop", "del", "pexpire")


def check_name(name: str) -> str:
    """`name` when it may name a person; ValueError saying why otherwise."""
    if not NAME_RE.match(name or ""):
        raise ValueError(f"person name {name!r} must start with a letter or '_' and hold "
                         "only letters, digits, '_', '.' and '-' (at most 64)")
    return name


def user_name(pool: str, name: str) -> str:
    """The Redis ACL user of person `name` in `pool`."""
    return f"fw-{pool}-u-{check_name(name)}"


def person_rules(pool: str, name: str) -> list[str]:
    """The ACL rules (without user name or password) of person `name` in `pool`.

    The root permissions reach every key of the pool with read commands only (and
    the read scripts: EVALSHA needs full access to the keys a script declares, and
    those scripts run reads only); the writes are in selectors, each on its keys."""
    check_name(name)
    own = pool_pattern(pool, f"u:{name}:*")
    keys = PoolKeys(pool)
    rules = ["resetkeys", f"~{pool_pattern(pool)}", "resetchannels", "-@all"]
    rules += [f"+{command}" for command in (*COMMON, "cluster|slots", "acl|whoami")]
    rules += [f"+evalsha|{sha(script)}" for script in READERS]
    rules.append(f"(~{own} " + " ".join(f"+{command}" for command in OWN_COMMANDS) + ")")
    doorbell = pool_pattern(pool, keys.doorbell[len(keys.prefix):])
    rules.append(f"(~{doorbell} +rpush)")
    return rules


def user_line(pool: str, name: str, password: str | None, as_command: bool = False) -> str:
    """The ACL file line (or ACL SETUSER command) of person `name`."""
    words = [user_name(pool, name), "reset", "on", password_rule(password),
             *person_rules(pool, name)]
    return ("ACL SETUSER " if as_command else "user ") + " ".join(words)


def remove_line(pool: str, name: str, as_command: bool = False) -> str:
    """What removes person `name`'s user: ACL DELUSER, or the ACL file's instruction."""
    user = user_name(pool, name)
    if as_command:
        return f"ACL DELUSER {user}"
    return f"# delete the line 'user {user} ...' from the ACL file, then run ACL LOAD"


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
