"""The warning `fetchwork submit` gives root: root's jobs do not run as root."""

from __future__ import annotations

import os

import click

ROOT_NAMES = ("root",)


def root_warning(owner: str, euid: int) -> str | None:
    """What a submitter should know when its jobs' Owner is root (pure); None otherwise."""
    if euid != 0 and owner not in ROOT_NAMES:
        return None
    return ("you submit as root, and jobs never run as root: on the execute machines these "
            "run as the slot's user (SLOT<N>_USER or SLOT_USER), else as nobody. Their "
            "executable, input files and Iwd must be readable, and their output folders "
            "writable, by that user, and the files they write belong to it; submit as the "
            "user who should own the work instead")


def warn_if_root(owner: str) -> None:
    """Print `root_warning` to stderr when it applies."""
    text = root_warning(owner, os.geteuid())
    if text is not None:
        click.echo(f"fetchwork: warning: {text}", err=True)
