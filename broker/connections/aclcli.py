"""`fetchwork acl`: print the Redis ACL users of a pool's roles and people, and the
pool's public job signing key."""

from __future__ import annotations

from pathlib import Path

import click

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.config import signedjob
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError

from . import aclpeople as people
from .acl import ROLES, default_user, user_line
from .remote import read_password

USER, PUBLIC_KEY = "user", "public-key"


@click.command("acl")
@click.argument("roles", nargs=-1, metavar="[ROLES]... | user NAME | public-key")
@click.option("--pool", help="The pool whose keys the users may reach (default: FETCHWORK_POOL).")
@click.option("--user", help="User name for a single role (default: fw-<pool>-<role>).")
@click.option("--password-file", type=click.Path(dir_okay=False),
              help="Give a single role (or the person) this file's first line as password "
                   "(stored hashed).")
@click.option("--commands", is_flag=True,
              help="Print ACL SETUSER commands (for redis-cli) instead of ACL file lines.")
@click.option("--remove", is_flag=True,
              help="With `user NAME`: print what removes that person's user instead.")
def acl_command(roles: tuple[str, ...], pool: str | None, user: str | None,
                password_file: str | None, commands: bool, remove: bool) -> None:
    """Print Redis ACL users for ROLES (default: all three) of one pool.

    \b
    submitter  submit, query, rm, hold and release jobs
    execute    claim, renew and finish jobs and publish slot ads (startds)
    admin      everything on the pool's keys (the broker service)

    Each user reaches only the pool's keys (fw:{POOL}:*) and runs only its
    role's Lua scripts, named by their SHA1: print the rules again after
    upgrading fetchwork. Put the lines in the server's ACL file (aclfile) or
    pipe the --commands form into redis-cli. Without --password-file a user
    has no password and cannot log in until one is set
    (ACL SETUSER NAME >password). Clients name the user in
    FETCHWORK_BROKER_USERNAME and its password in FETCHWORK_BROKER_PASSWORD_FILE.

    \b
    `fetchwork acl user NAME` prints the user fw-<pool>-u-NAME of one person:
    it reads the whole pool (but the transfer manifests and chunk counts,
    which would give it other people's files) and writes only its own
    namespace (fw:{POOL}:u:NAME:*); its submissions (with their input files)
    and its rm, hold, release, requeue, edit and transfer-data requests are
    carried out by the broker's leader, which sets Owner to NAME and lets a
    person act on, and fetch the outputs of, its own jobs only
    (QUEUE_SUPER_USERS: anyone's). --remove prints ACL DELUSER (with
    --commands) or what to delete from the ACL file.

    `fetchwork acl public-key` prints the pool's public job signing key (PEM),
    made from JOB_SIGNING_KEY: copy it to every execute machine and name it in
    JOB_SIGNING_PUBLIC_KEY. See docs/trust.md.
    """
    if roles and roles[0] == PUBLIC_KEY:
        if len(roles) != 1:
            raise click.UsageError("public-key takes no further argument")
        click.echo(_public_key(), nl=False)
        return
    pool = (pool or Config.load().require("FETCHWORK_POOL")).strip()
    try:
        PoolKeys(pool)
    except ValueError as exc:
        raise ConfigError(f"{exc} (--pool or FETCHWORK_POOL)") from exc
    if roles and roles[0] == USER:
        _person(roles[1:], pool, user, password_file, commands, remove)
        return
    if remove:
        raise click.UsageError("--remove applies to `fetchwork acl user NAME`")
    unknown = [role for role in roles if role not in ROLES]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r} is not one of {', '.join(ROLES)} "
                                 f"(or `{USER} NAME`, `{PUBLIC_KEY}`)", param_hint="ROLES")
    chosen = roles or ROLES
    if (user or password_file) and len(chosen) != 1:
        raise click.UsageError("--user and --password-file need exactly one ROLE")
    password = read_password(password_file) if password_file else None
    for role in chosen:
        click.echo(user_line(user or default_user(role, pool), role, pool, password, commands))


def _person(args: tuple[str, ...], pool: str, user: str | None, password_file: str | None,
            commands: bool, remove: bool) -> None:
    if len(args) != 1:
        raise click.UsageError("give one person: fetchwork acl user NAME")
    if user:
        raise click.UsageError(f"a person's user is always fw-{pool}-u-NAME; drop --user")
    try:
        name = people.check_name(args[0])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from exc
    if remove:
        if password_file:
            raise click.UsageError("--remove takes no --password-file")
        click.echo(people.remove_line(pool, name, commands))
        return
    password = read_password(password_file) if password_file else None
    click.echo(people.user_line(pool, name, password, commands))


def _public_key() -> str:
    """The PEM of JOB_SIGNING_KEY's public half (ConfigError when it is not set here)."""
    path = (Config.load().get("JOB_SIGNING_KEY") or "").strip()
    if not path:
        raise ConfigError("JOB_SIGNING_KEY is not set here: run this where the broker "
                          "service runs (with its configuration), or in the state directory "
                          "of a pool `fetchwork up` started")
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"JOB_SIGNING_KEY = {path}: cannot read it: {exc.strerror}") from exc
    try:
        return signedjob.public_pem(signedjob.read_private_key(pem, path))
    except ValueError as exc:
        raise ConfigError(f"JOB_SIGNING_KEY: {exc}") from exc
