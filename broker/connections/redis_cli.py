"""`fetchwork redis`: start, stop and inspect the embedded Redis of a state directory."""

from __future__ import annotations

import click

from fetchwork.config.loader import Config

from .embedded import embedded_for


@click.group("redis")
def redis_group() -> None:
    """The embedded Redis used when FETCHWORK_BROKER is not set.

    It runs on a unix socket in FETCHWORK_STATE_DIR/redis with an
    append-only file, and is shared by every fetchwork command that uses
    the same state directory.
    """


@redis_group.command("start")
def start() -> None:
    """Start the embedded Redis unless it already runs; print its URL."""
    server = embedded_for(Config.load())
    started = server.start()
    click.echo(f"{server.url} ({'started' if started else 'already running'})")


@redis_group.command("stop")
def stop() -> None:
    """Shut the embedded Redis down cleanly (its data stays in the AOF)."""
    server = embedded_for(Config.load())
    click.echo("stopped" if server.stop() else "not running")


@redis_group.command("status")
def status() -> None:
    """Print the URL and pid of the embedded Redis; exit 1 when it is not running."""
    server = embedded_for(Config.load())
    if not server.is_running():
        click.echo(f"not running (state in {server.folder})")
        raise SystemExit(1)
    click.echo(f"{server.url} pid {server.server_pid()}")

