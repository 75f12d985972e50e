"""Which account a root starter runs a job (and its program hooks) as.

HTCondor's rule for a starter running as root: the job's `Owner` when
STARTER_ALLOW_RUNAS_OWNER is true and that user exists on this machine and
is not root; else the slot's user (`SLOT<N>_USER`, else `SLOT_USER`); else
`nobody`. A job never runs as root: a slot user that is root is a
configuration error, and an Owner that is root (or unknown here) falls
through to the slot user. A starter that is not root runs everything as
itself. `choose_account` is the pure decision; `job_account` reads the
configuration and the user database.
"""

from __future__ import annotations

import logging
import os
import pwd
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fetchwork.config.loader import Config
from fetchwork.errors import StarterError

log = logging.getLogger(__name__)

FALLBACK_USER = "nobody"


@dataclass(frozen=True)
class Account:
    """A user of this machine."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Choice:
    """The account a job runs as, and why (for the log)."""

    account: Account
    why: str


Lookup = Callable[[str], Account | None]


def lookup_account(name: str) -> Account | None:
    """The user named `name` (or numbered, when all digits) on this machine, or None."""
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError, OverflowError):
        return None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


# The user database's answers this process has had: name -> (when, account or None).
_remembered: dict[str, tuple[float, Account | None]] = {}


def remembered_lookup(refresh_s: float) -> Lookup:
    """`lookup_account`, each answer (a missing user too) kept for `refresh_s` seconds
    in this process, as HTCondor's daemons keep theirs (PASSWD_CACHE_REFRESH). A
    starter that runs several jobs looks their Owner up once rather than every job
    (an Owner with no account here goes through every name service before the
    fallback user is looked up in turn); 0 asks the database every time."""
    def lookup(name: str) -> Account | None:
        now = time.monotonic()
        kept = _remembered.get(name)
        if kept is not None and now - kept[0] < refresh_s:
            return kept[1]
        account = lookup_account(name)
        if refresh_s > 0:
            _remembered[name] = (now, account)
        return account

    return lookup


def choose_account(owner: str | None, allow_runas_owner: bool, slot_user: str | None,
                   slot_user_knob: str, lookup: Lookup) -> Choice:
    """The account for a job of `owner` on a slot whose configured user is `slot_user`
    (named by knob `slot_user_knob`); StarterError when the configuration is unusable."""
    owner = (owner or "").strip()
    if allow_runas_owner and owner and not owner.isdigit():
        account = lookup(owner)
        if account is not None and account.uid != 0:
            return Choice(account, f"its Owner {owner}")
    slot_user = (slot_user or "").strip()
    if slot_user:
        account = lookup(slot_user)
        if account is None:
            raise StarterError(f"{slot_user_knob} {slot_user!r} is not a user on this machine")
        if account.uid == 0:
            raise StarterError(f"{slot_user_knob} must not be root: jobs never run as root")
        return Choice(account, slot_user_knob)
    account = lookup(FALLBACK_USER)
    if account is None or account.uid == 0:
        raise StarterError(f"there is no user {FALLBACK_USER!r} on this machine to run jobs "
                           "as; set SLOT_USER")
    return Choice(account, f"no other user applies ({FALLBACK_USER})")


def slot_user_setting(config: Config, slot: int) -> tuple[str | None, str]:
    """The slot's configured user and the knob that set it: SLOT<N>_USER, else SLOT_USER."""
    own = (config.get(f"SLOT{slot}_USER") or "").strip()
    if own:
        return own, f"SLOT{slot}_USER"
    return config.get("SLOT_USER"), "SLOT_USER"


def job_account(config: Config, job_ad: Any, slot: int,
                lookup: Lookup | None = None, owner_trusted: bool = True) -> Choice | None:
    """The account a starter runs this job as; None unless the starter is root. With
    `owner_trusted` false (no checked signature: jobsignature.py) never the Owner.
    `lookup`: the user database, by default as remembered (`remembered_lookup`)."""
    if os.geteuid() != 0:
        return None
    if lookup is None:
        lookup = remembered_lookup(config.get_duration_s("PASSWD_CACHE_REFRESH"))
    owner = job_ad.get("Owner") if job_ad is not None else None
    slot_user, knob = slot_user_setting(config, slot)
    allow = config.get_bool("STARTER_ALLOW_RUNAS_OWNER") and owner_trusted
    return choose_account(owner if isinstance(owner, str) else None, allow, slot_user, knob,
                          lookup)


# The last choice logged at info by this process: a starter kept across jobs says
# the account once while its jobs keep running as it, for the same reason.
_last_told: list[tuple[str, int, str]] = []


def job_user(config: Config, job_ad: Any, slot: int,
             owner_trusted: bool = True) -> tuple[int, int] | None:
    """(uid, gid) for `job_account`, the choice logged (at info when it differs from
    this process's previous job's, else at debug); None unless the starter is root."""
    choice = job_account(config, job_ad, slot, owner_trusted=owner_trusted)
    if choice is None:
        return None
    told = (choice.account.name, choice.account.uid, choice.why)
    level = logging.DEBUG if _last_told == [told] else logging.INFO
    _last_told[:] = [told]
    log.log(level, "the job runs as %s (uid %s): %s", *told)
    return choice.account.uid, choice.account.gid


def give_tree(path: str, user: tuple[int, int] | None) -> None:
    """Make the job's user the owner of `path` and everything in it (None: nobody new)."""
    if user is None:
        return
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, *user)
