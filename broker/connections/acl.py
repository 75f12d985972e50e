"""Redis ACL rules for the roles of one pool: submitter, execute and admin.

Every job transition script takes the same pool keys (lua/lib.lua), and
Redis checks a script's declared keys (and each command the script runs)
against the caller's permissions, so key patterns alone cannot tell a claim from a
submit. Each role is therefore allowed EVALSHA only with the SHA1 of its own
scripts (Redis's first-argument rule, `+evalsha|<sha1>`), plus the plain
commands its reads and its scripts' bodies use, all on the pool's keys
(`~fw:{P}:*`). ACL selectors give the execute role SET only on slot ads, and
DEL only on the activation request and reply keys of its claims; ZADD, XADD,
INCR and SADD are granted per key the same way (`SELECTED`), so that, for
instance, the submitter role's raw ZADD to the running set is refused, and no
role can write into a person's namespace (`fw:{P}:u:<name>:*`), where the
leader reads that person's requests (broker/trust/).
No role may run commands without keys that reach beyond the pool (KEYS,
SCAN, FLUSHALL, CONFIG, ...). The SHA1s change when the scripts change, so
print the rules again after an upgrade.

Redis runs a script's commands with the caller's rights, so a role can also
send those same commands itself: the rules keep each role to its own
scripts and to its pool, and keep the execute side away from submitting,
removing, holding and releasing jobs and from every other pool.
"""

from __future__ import annotations

import hashlib
import re

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.broker.store.scripts import sha

ROLES = ("submitter", "execute", "admin")

# Commands both roles send themselves: reads of the pool's keys, pipelines,
# loading a script the server lacks, choosing the database.
COMMON = ("ping", "echo", "time", "select", "multi", "exec", "discard", "script|load",
          "get", "mget", "exists", "type", "pttl", "hget", "hmget", "hgetall", "hkeys", "hlen",
          "zrange", "zrangebyscore", "zrevrange", "zrevrangebyscore", "zscore", "zmscore",
          "zrank", "zcard", "zrangebylex",
          "zcount", "xread", "xrange", "xrevrange", "xlen",
          # the claim's read of a job's signed batch (lua/sigbatch.lua)
          "getrange")
# On Redis Cluster (FETCHWORK_BROKER_CLUSTER): reading the slot map to find the pool's master.
CLUSTER_MAP = ("cluster|slots",)
# Commands the bodies of the job transition scripts run (the LIBRARY parts and each script)
# on any of the pool's keys; ZADD and XADD are granted per key (SELECTED), and for the
# execute role the hash writes and DECR too.
SCRIPT_BODIES = ("hset", "hdel", "hexists", "decr", "zrem", "hsetnx")
EXECUTE_SELECTED = ("hset", "hdel", "hsetnx", "decr")

SCRIPTS = {
    "submitter": ("stage", "submit", "remove", "hold", "release", "requeue", "read_ads",
                  "read_fields", "read_ids"),
    "execute": ("claim", "claim_quiet", "reject", "renew", "finish", "activate_abandon",
                "read_ads", "read_fields", "read_ids", "policy_exit", "read_groups",
                "read_backfill",
                # File transfer: inputs fetched and outputs returned (transfer/).
                "transfer_chunk", "transfer_attach", "transfer_event",
                # the checkpoint an evicted job replaces
                "transfer_detach"),
}
# File transfer: the submitter sends inputs and settles outputs it fetched.
SCRIPTS["submitter"] += ("transfer_chunk", "transfer_attach", "transfer_detach",
                         "transfer_settle")
# What the transfer scripts (and a job leaving the queue) do to the transfer keys,
# and nowhere else (lua/transferrefs.lua).
TRANSFER_BODIES = ("set", "pexpire", "persist", "hincrby", "incrby", "decrby", "del", "strlen")
# Plain commands a role sends beyond COMMON (WAIT: FETCHWORK_BROKER_WAIT_REPLICAS,
# broker/connections/durability.py).
OWN: dict[str, tuple[str, ...]] = {"submitter": ("wait",), "execute": ()}
# Writes a role may send (itself or in its scripts) only to some keys, as ACL selectors
# (key suffix patterns after fw:{P}:, then commands), so that a raw command outside the
# role's work is refused: the submitter role cannot ZADD a job to the running set or
# the activating set, no role can XADD anywhere but the events stream (a person's
# request stream is that person's alone: broker/trust/people.py), and counters and
# dependency sets are written only where submissions write them.
SELECTED: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = {
    "submitter": (
        (("events",), ("xadd",)),
        (("queue", "idle", "validating", "ac:members", "ac:groups", "holds", "history",
          "periodic"), ("zadd",)),
        (("counter:*",), ("incr", "incrby")),
        (("depwait", "dependents:*"), ("sadd",)),
    ),
    "execute": (
        (("events",), ("xadd",)),
        # Its scripts write job and cluster hashes, the claim's bookkeeping and the head
        # counter; never the clusters hash, where the leader's own submissions are marked
        # (broker/trust/desk.py), nor anything in a person's namespace.
        (("job:*", "cluster:*", "reservations", "ac:reps", "activation:*", "psledger",
          "sortslots"), ("hset", "hdel", "hsetnx")),
        (("counter:head",), ("decr",)),
        (("queue", "idle", "running", "history", "holds", "activating", "blocks", "soft",
          "ac:members", "ac:groups", "slots"), ("zadd",)),
        # File transfer: a run's outputs attached (a new manifest, the outputs waiting),
        # and an evicted job's old checkpoint released (its reference counts).
        (("xfer:manifest:*",), ("hset",)),
        (("xfer:outputs",), ("zadd",)),
        (("xfer:refs", "xfer:chunkrefs"), ("hdel",)),
    ),
}
# Signed admission (broker/filters/signing.py): the staged digests of jobs that wait
# for the leader live in `staged:*`, which stage.lua (the submitter role and the
# broker service) writes and the leader drops. No execute selector may name that
# family: a job's hash is the execute role's to write, its staged digest never is,
# and that is what lets the leader refuse a job rewritten while it waited.
# Signed batches (lua/sigbatch.lua): `sig:*` strings, the `sigbatches` set and the
# `sigcount` counter. No rule here grants SET, SETRANGE, APPEND, DEL, SADD or SREM on
# them, so only the broker service (admin) writes the batches (the submitter's DECR
# reaches `sigcount`, but admit_signed.lua never reuses a stored batch's number);
# every role reads them, the execute role's claims a job's nodes with GETRANGE (COMMON).
# Kept from the admin too: commands whose reach is the whole server, not one pool.
SERVER_WIDE = ("keys", "scan", "randomkey", "flushall", "flushdb", "swapdb", "config", "debug",
               "shutdown", "monitor", "save", "bgsave", "bgrewriteaof", "replicaof", "slaveof",
               "module", "acl", "client", "cluster", "failover", "migrate", "sync", "psync",
               "info", "script|flush", "script|kill", "function")


def pool_pattern(pool: str, suffix: str = "*") -> str:
    """The ACL key pattern `fw:{P}:<suffix>`, with glob characters of the pool name escaped."""
    prefix = PoolKeys(pool).prefix
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + suffix


def role_rules(role: str, pool: str) -> list[str]:
    """The ACL rules (without user name or password) of `role` for pool `pool`."""
    keys = f"~{pool_pattern(pool)}"
    if role == "admin":
        return ["resetkeys", keys, "resetchannels", "+@all",
                *(f"-{command}" for command in SERVER_WIDE),
                *(f"+{command}" for command in CLUSTER_MAP)]
    if role not in SCRIPTS:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
    rules = ["resetkeys", keys, "resetchannels", "-@all"]
    bodies = [command for command in SCRIPT_BODIES
              if role != "execute" or command not in EXECUTE_SELECTED]
    rules += [f"+{command}" for command in (*COMMON, *CLUSTER_MAP, *bodies, *OWN[role])]
    rules += [f"+evalsha|{sha(name)}" for name in SCRIPTS[role]]
    for suffixes, commands in SELECTED[role]:
        rules.append("(" + " ".join(f"~{pool_pattern(pool, suffix)}" for suffix in suffixes)
                     + " " + " ".join(f"+{command}" for command in commands) + ")")
    rules.append(f"(~{pool_pattern(pool, 'xfer:*')} "
                 + " ".join(f"+{command}" for command in TRANSFER_BODIES) + ")")
    if role == "execute":
        # Publishing slot ads: SET and the expiry sweep only on the slot keys
        # (DEL withdraws the ad of a slot whose startd exits).
        rules.append(f"(~{pool_pattern(pool, 'slot:*')} ~{pool_pattern(pool, 'slots')} "
                     "+set +zremrangebyscore +del)")
        # A claim that waits for the activation filters: its request and reply keys,
        # and the pass counter in the filter summary.
        rules.append(f"(~{pool_pattern(pool, 'activation:*')} +pexpire +blpop +del)")
        rules.append(f"(~{pool_pattern(pool, 'filters')} +hincrby)")
    return rules


def default_user(role: str, pool: str) -> str:
    return f"fw-{pool}-{role}"


def password_rule(password: str | None) -> str:
    """`#<sha256>` for a password (the clear text never goes into the rules), else none."""
    if password is None:
        return "resetpass"
    return "#" + hashlib.sha256(password.encode("utf-8")).hexdigest()


def user_line(user: str, role: str, pool: str, password: str | None,
              as_command: bool = False) -> str:
    """One ACL file line (`user NAME ...`), or the ACL SETUSER command, for a role."""
    words = [user, "reset", "on", password_rule(password), *role_rules(role, pool)]
    return ("ACL SETUSER " if as_command else "user ") + " ".join(words)
