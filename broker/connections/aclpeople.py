"""The Redis ACL users of people: one per person, writing only its own namespace.

`fetchwork acl user NAME` prints `fw-<pool>-u-<NAME>`. It may read every key
of the pool (`fetchwork q` and `history` read everything) and write, through
ACL selectors, only its own namespace `fw:{P}:u:<NAME>:*` (its request
stream and the leader's replies: broker/trust/requests.py; the inputs it
stages and the output manifests the leader hands it: broker/trust/personfiles.py)
and the pool's doorbell list. It runs no transition script: the leader carries
out its requests (broker/trust/desk.py).

Its reads stop short of two transfer keys: the manifests (`xfer:manifest:*`) and
the chunk reference counts (`xfer:chunkrefs`), the only places that list the
digests of other people's files. A chunk is named by the SHA-256 of its bytes,
so a person may read (and test for) a chunk only when it already knows the
digest: of its own files, or of outputs the leader handed it after checking
that the job is its own.
"""

from __future__ import annotations

import re

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.broker.store.scripts import sha

from .acl import COMMON, password_rule, pool_pattern

# A person's name: what a login name may be (POSIX portable characters), so it is
# literal in ACL key patterns and in key names.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
# The read-only scripts `q` and `history` run.
READERS = ("read_ads", "read_fields", "read_ids")
# What a person does in its own namespace: send a request, take its reply.
OWN_COMMANDS = ("xadd", "blpop", "lpop", "del", "pexpire",
                # stage inputs, take handed outputs (broker/trust/personfiles.py)
                "hset", "hsetnx", "hdel")
# What a person reads, after fw:{P}: every key but the transfer manifests and the
# chunk reference counts (the chunks themselves: `xfer:chunk:*`). Redis's glob has
# no "all but", so: everything not starting with x, then the transfer keys allowed.
READ_SUFFIXES = ("[^x]*", "xfer:[^cm]*", "xfer:chunk:*")


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
    rules = ["resetkeys", *(f"~{pool_pattern(pool, suffix)}" for suffix in READ_SUFFIXES),
             "resetchannels", "-@all"]
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
