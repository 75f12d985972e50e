"""`fetchwork completion SHELL`: the script that lets bash, zsh or fish complete
fetchwork's commands and options (click's shell completion)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")
# The variable the shell sets when it asks the `fetchwork` command for completions.
COMPLETE_VAR = "_FETCHWORK_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the completion script for SHELL. Load it once per shell:

    \b
      bash:  eval "$(fetchwork completion bash)"     (or add it to ~/.bashrc)
      zsh:   eval "$(fetchwork completion zsh)"      (or add it to ~/.zshrc)
      fish:  fetchwork completion fish > ~/.config/fish/completions/fetchwork.fish
    """
    from fetchwork.cli import main

    completer = get_completion_class(shell)
    assert completer is not None  # the three SHELLS are click's own
    click.echo(completer(main, {}, "fetchwork", COMPLETE_VAR).source())
