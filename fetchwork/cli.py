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

# Modules that define click commands, each exporting `COMMANDS` (a list).
# Only components whose commands work are listed.
COMMAND_MODULES = [
    "fetchwork.submit.submitcli",
    "fetchwork.submit.usercli",
    "fetchwork.poolcli",
    "fetchwork.startd.cli",
    "fetchwork.broker.cli",
    "fetchwork.hooks.cli",
    "fetchwork.config.cli",
    "fetchwork.broker.redis_cli",
]

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


for _module_name in COMMAND_MODULES:
    for _command in importlib.import_module(_module_name).COMMANDS:
        main.add_command(_command)


if __name__ == "__main__":
    main()
