"""The file transfer's submit commands and the attributes condor_submit makes of them
(pure): should_transfer_files -> ShouldTransferFiles, transfer_input_files ->
TransferInput, ... with HTCondor's names and values, checked as they are read.

A description that names none of these commands transfers nothing, as before
(its files must be reachable where it runs). Naming any of them makes
`should_transfer_files` default to IF_NEEDED, HTCondor's default.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

# Submit command -> attribute, for commands kept as text.
TEXTS = {
    "transfer_input_files": "TransferInput",
    "transfer_output_files": "TransferOutput",
    "transfer_output_remaps": "TransferOutputRemaps",
    "output_destination": "OutputDestination",
    "transfer_plugins": "TransferPlugins",
}
BOOLS = {"preserve_relative_paths": "PreserveRelativePaths"}
SIZES = {"max_transfer_input_mb": "MaxTransferInputMB",
         "max_transfer_output_mb": "MaxTransferOutputMB"}
CHOICES = {
    "should_transfer_files": ("ShouldTransferFiles", ("YES", "NO", "IF_NEEDED")),
    "when_to_transfer_output": ("WhenToTransferOutput",
                                ("ON_EXIT", "ON_EXIT_OR_EVICT", "ON_SUCCESS")),
}
TRANSFER_COMMANDS = frozenset((*TEXTS, *BOOLS, *SIZES, *CHOICES))

Fail = Callable[[str, str], Exception]
Flag = Callable[[str, str], bool]
Whole = Callable[[str, str, int | None], int]


@cache
def file_system_domain() -> str:
    """The submit machine's FileSystemDomain: its full host name, HTCondor's default."""
    return socket.getfqdn()


def transfer_attrs(values: Mapping[str, str], fail: Fail, flag: Flag,
                   whole: Whole) -> list[tuple[str, Any]]:
    """The transfer attributes of one job from its submit commands (lower-case
    names); nothing when the description names no transfer command."""
    given = {name: values[name].strip() for name in TRANSFER_COMMANDS
             if values.get(name, "").strip()}
    if not given:
        return []
    attrs: list[tuple[str, Any]] = []
    for command, (attr, allowed) in CHOICES.items():
        word = given.get(command, "IF_NEEDED" if command == "should_transfer_files"
                         else "ON_EXIT").upper()
        if word not in allowed:
            raise fail(f"{command} must be one of {', '.join(allowed)}, got "
                       f"{given[command]!r}", command)
        attrs.append((attr, word))
    for command, attr in TEXTS.items():
        if command in given:
            attrs.append((attr, _unquoted(given[command])))
    for command, attr in BOOLS.items():
        if command in given:
            attrs.append((attr, flag(given[command], command)))
    for command, attr in SIZES.items():
        if command in given:
            attrs.append((attr, whole(given[command], command, 0)))
    attrs.append(("FileSystemDomain", file_system_domain()))
    return attrs


def _unquoted(text: str) -> str:
    """A value as condor_submit stores it: one pair of surrounding double quotes (as
    transfer_output_remaps is usually written) taken off."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def in_iwd(path: str, iwd: str) -> str | None:
    """`path` (absolute, or relative to `iwd`) as a name relative to `iwd`, or None when
    it lies outside it."""
    full = os.path.normpath(os.path.join(iwd, path))
    relative = os.path.relpath(full, iwd)
    return None if relative == ".." or relative.startswith("../") else relative
