"""`fetchwork acl`: print the Redis ACL users of a pool's roles."""

from __future__ import annotations

import click

from fetchwork.broker.store.keys import PoolKeys
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError

from .acl import ROLES, default_user, user_line
from .remote import read_password


@click.command("acl")
@click.argument("roles", nargs=-1, type=click.Choice(ROLES))
@click.option("--pool", help="The pool whose keys the users may reach (default: FETCHWORK_POOL).")
@click.option("--user", help="User name for a single role (default: fw-<pool>-<role>).")
@click.option("--password-file", type=click.Path(dir_okay=False),
              help="Give a single role this file's first line as password (stored hashed).")
@click.option("--commands", is_flag=True,
              help="Print ACL SETUSER commands (for redis-cli) instead of ACL file lines.")
def acl_command(roles: tuple[str, ...], pool: str | None, user: str | None,
                password_file: str | None, commands: bool) -> None:
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
    """
    pool = (pool or Config.load().require("FETCHWORK_POOL")).strip()
    try:
        PoolKeys(pool)
    except ValueError as exc:
        raise ConfigError(f"{exc} (--pool or FETCHWORK_POOL)") from exc
    chosen = roles or ROLES
    if (user or password_file) and len(chosen) != 1:
        raise click.UsageError("--user and --password-file need exactly one ROLE")
    password = read_password(password_file) if password_file else None
    for role in chosen:
        click.echo(user_line(user or default_user(role, pool), role, pool, password, commands))
