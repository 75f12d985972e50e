"""Which files of a finished job's sandbox go back, and under which names (pure:
the job ad and a listing of the sandbox in, a plan out).

`transfer_output_files` unset: every regular file at the sandbox's top that is
new or changed since the inputs arrived (not the job's ads, nor the executable);
set: exactly those names, files or folders, and one the job did not make holds
the job (HTCondor's TransferOutputError, code 12). `output` and `error` always go
back. A file arrives in `Iwd` under its base name, or its whole path with
`preserve_relative_paths`; `transfer_output_remaps` renames (`name = new; ...`),
and a new name that is a URL is an upload through a plugin. A symbolic link is
never followed: a listed one holds the job, an unlisted one stays behind.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fetchwork.config.protocol import HoldCode
from fetchwork.errors import TransferError

from .inputs import is_url, split_list
from .manifest import check_name as _check

CODE = HoldCode.TRANSFER_OUTPUT_ERROR


def check_name(name: str) -> str:
    """`name` when safe (manifest.check_name), else TransferError with code 12."""
    try:
        return _check(name)
    except TransferError as exc:
        raise TransferError(str(exc), CODE) from exc


# What the input step leaves in the sandbox: the names and sizes/mtimes of what
# arrived, so the output step can tell new or changed files.
SNAPSHOT_FILE = ".fetchwork.inputs"
# Files of the sandbox that are the system's, never outputs.
SYSTEM_FILES = frozenset({".job.ad", ".machine.ad", SNAPSHOT_FILE, ".chirp.config",
                          ".update.ad"})
# The original Iwd of a job whose sandbox is its working folder (set by the starter).
SUBMIT_IWD_ATTR = "FetchworkSubmitIwd"



@dataclass(frozen=True)
class Found:
    """One entry of the sandbox: its kind ('f' file, 'd' folder, 'l' link, 'o' other),
    size and mtime (ns)."""

    kind: str
    size: int = 0
    mtime_ns: int = 0


@dataclass(frozen=True)
class Planned:
    """A file to send back: its name in the sandbox, and where it goes (a name under
    Iwd, or a URL)."""

    source: str
    target: str

    @property
    def to_url(self) -> bool:
        return is_url(self.target)


def parse_remaps(text: str) -> dict[str, str]:
    """`name = newname; ...` (HTCondor's TransferOutputRemaps; `\\;` and `\\=` escape)."""
    remaps: dict[str, str] = {}
    for part in _split_unescaped(text, ";"):
        if not part.strip():
            continue
        pieces = _split_unescaped(part, "=")
        if len(pieces) != 2 or not pieces[0].strip() or not pieces[1].strip():
            raise TransferError(f"transfer_output_remaps: {part.strip()!r} is not "
                                "'name = newname'", CODE)
        remaps[pieces[0].strip()] = pieces[1].strip()
    return remaps


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _text(ad: Mapping[str, Any], name: str) -> str | None:
    value = ad.get(name)
    return value if isinstance(value, str) and value.strip() else None


def plan_outputs(ad: Mapping[str, Any], listing: Mapping[str, Found],
                 arrived: Mapping[str, Found]) -> list[Planned]:
    """The files to send back. `listing` is every entry of the sandbox by relative name
    (links not followed), `arrived` what the input step wrote. TransferError (12)
    naming the file for a listed output that is missing or a link."""
    preserve = ad.get("PreserveRelativePaths") is True
    chosen: dict[str, str] = {}  # source -> target
    listed = _text(ad, "TransferOutput")
    if listed is None:
        executable = posixpath.basename(_text(ad, "Cmd") or "")
        for name, found in sorted(listing.items()):
            if "/" in name or found.kind != "f" or name in SYSTEM_FILES or name == executable:
                continue
            if arrived.get(name) == found:
                continue  # unchanged since it arrived
            chosen[name] = name
    else:
        for item in split_list(listed):
            name = check_name(item)
            hit = listing.get(name)
            if hit is None:
                raise TransferError(f"{name}: the job did not make this output file "
                                    "(transfer_output_files)", CODE)
            if hit.kind == "l":
                raise TransferError(f"{name}: a symbolic link; links are not transferred",
                                    CODE)
            if hit.kind == "d":
                for inner, inner_found in sorted(listing.items()):
                    if inner.startswith(name + "/") and inner_found.kind == "f":
                        chosen[inner] = inner if preserve else posixpath.join(
                            posixpath.basename(name), inner[len(name) + 1:])
            elif hit.kind == "f":
                chosen[name] = name if preserve else posixpath.basename(name)
            else:
                raise TransferError(f"{name}: not a regular file", CODE)
    for attr in ("Out", "Err"):
        stream = _text(ad, attr)
        if stream and stream != os.devnull and listing.get(stream, Found("")).kind == "f":
            chosen[check_name(stream)] = check_name(stream)
    remaps = parse_remaps(_text(ad, "TransferOutputRemaps") or "")
    submit_iwd = _text(ad, SUBMIT_IWD_ATTR)
    planned = []
    for source, target in chosen.items():
        new = remaps.get(target, remaps.get(source, target))
        if not is_url(new):
            new = _inside_iwd(new, submit_iwd)
        planned.append(Planned(source, new))
    return planned


def _inside_iwd(name: str, submit_iwd: str | None) -> str:
    """A remapped name as a name under Iwd: an absolute one must lie inside it."""
    if name.startswith("/"):
        if submit_iwd is None:
            raise TransferError(f"{name}: an absolute name outside the job's Iwd", CODE)
        relative = os.path.relpath(os.path.normpath(name), submit_iwd)
        if relative == ".." or relative.startswith("../"):
            raise TransferError(f"{name}: outside the job's Iwd {submit_iwd}; outputs are "
                                "never written outside it", CODE)
        name = relative
    return check_name(name)


def list_sandbox(top: str) -> dict[str, Found]:
    """Every entry under `top` by relative name; links are listed, not followed."""
    found: dict[str, Found] = {}
    for root, dirs, files in os.walk(top):
        relative = os.path.relpath(root, top)
        for name in dirs + files:
            path = os.path.join(root, name)
            key = name if relative == "." else posixpath.join(relative, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if os.path.islink(path):
                found[key] = Found("l")
            elif name in dirs:
                found[key] = Found("d")
            elif os.path.isfile(path):
                found[key] = Found("f", info.st_size, info.st_mtime_ns)
            else:
                found[key] = Found("o")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return found
