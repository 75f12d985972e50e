"""The `fetchwork` command: one click group; each component adds its commands.

Logging is configured here and nowhere else.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from fetchwork import __version__
from fetchwork.errors import FetchworkError

log = logging.getLogger(__name__)

# Every command: name -> (module, attribute). A command's module is imported
# only when that command runs (or when `--help` lists them all), so a daemon
# loads what it runs and nothing of the user commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "submit": ("fetchwork.submit.submitcli", "submit_command"),
    "q": ("fetchwork.submit.usercli", "q_command"),
    "history": ("fetchwork.submit.usercli", "history_command"),
    "rm": ("fetchwork.submit.usercli", "rm_command"),
    "hold": ("fetchwork.submit.usercli", "hold_command"),
    "release": ("fetchwork.submit.usercli", "release_command"),
    "requeue": ("fetchwork.submit.requeuecli", "requeue_command"),
    "qedit": ("fetchwork.submit.qeditcli", "qedit_command"),
    "status": ("fetchwork.submit.usercli", "status_command"),
    "wait": ("fetchwork.submit.waitcli", "wait_command"),
    "up": ("fetchwork.poolcli", "up_command"),
    "demo": ("fetchwork.demo", "demo_command"),
    "startd": ("fetchwork.startd.cli", "startd_command"),
    "broker": ("fetchwork.broker.cli", "broker_command"),
    "hook": ("fetchwork.hooks.cli", "hook_command"),
    "config": ("fetchwork.submit.configcli", "config_command"),
    "redis": ("fetchwork.broker.connections.redis_cli", "redis_group"),
    "acl": ("fetchwork.broker.connections.aclcli", "acl_command"),
    "glidein": ("fetchwork.startd.glidein.cli", "glidein_command"),
    "completion": ("fetchwork.completion", "completion_command"),
    "transfer-data": ("fetchwork.submit.transfercli", "transfer_data_command"),
}

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(verbosity: int) -> None:
    """Log to stderr; -v for INFO, -vv for DEBUG (daemons raise it to INFO themselves)."""
    level = logging.WARNING
    if verbosity == 1:
        level = logging.INFO
    elif verbosity >= 2:
        level = logging.DEBUG
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr, force=True)


class FetchworkGroup(click.Group):
    """A group that shows FetchworkError as a one-line message, exit status 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            command = load_command(cmd_name)
            self.add_command(command, cmd_name)
        return command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except FetchworkError as exc:
            click.echo(f"fetchwork: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=FetchworkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="fetchwork")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """fetchwork: a pull-based distributed worker system.

    A Redis-backed queue holds jobs; startds on execute machines fetch work
    through site-written hooks and run it. Configuration is read from the
    file named by FETCHWORK_CONFIG (else /etc/fetchwork/fetchwork.conf) and
    from _FETCHWORK_<NAME> environment variables.
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    configure_logging(verbose)


def load_command(name: str) -> click.Command:
    """Import the module of command `name` and return the command."""
    module_name, attribute = COMMANDS[name]
    command = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(command, click.Command), f"{module_name}.{attribute} is not a command"
    return command


if __name__ == "__main__":
    main()
