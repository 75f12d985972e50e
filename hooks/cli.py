"""`fetchwork hook NAME [WORD]`: the reference hooks as programs.

For sites that prefer program hooks (HTCondor style) to the in-process
form, e.g.:

    FETCHWORK_HOOK_JOB_EXIT = /usr/bin/fetchwork
    FETCHWORK_HOOK_JOB_EXIT_ARGS = hook JOB_EXIT

The hook name may come before or after the word the startd or starter adds
(`accept`/`reject`, `exit`/`evict`/`hold`/`remove`).
"""

from __future__ import annotations

import sys

import click


@click.command("hook", context_settings={"ignore_unknown_options": True})
@click.argument("words", nargs=-1, required=True)
def hook_command(words: tuple[str, ...]) -> None:
    """Run reference hook NAME (FETCH_WORK, REPLY_FETCH, EVICT_CLAIM, PREPARE_JOB,
    UPDATE_JOB_INFO, JOB_EXIT or WITHDRAW_SLOT) with its input on stdin, as the
    startd and starter call program hooks."""
    from fetchwork.hooks.reference import run_program

    sys.exit(run_program(list(words), sys.stdin.read()))

