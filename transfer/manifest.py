"""A sandbox's manifest: the files of one input or output sandbox, each with its
mode, size, SHA-256 and the digests of its chunks, the empty folders it holds and
the URLs the execute side fetches through plugins (pure: no Redis, no files).

A manifest is packed with msgpack and named by the SHA-256 of its packed bytes,
so equal sandboxes are one manifest in the pool. A small file may travel inside
its manifest (`FileEntry.data`, transfer/inline.py) instead of as a chunk: such a
manifest is packed as version 2, which a reader of version 1 refuses by name.
Every name is a relative POSIX path checked by `check_name`: no absolute name,
no `..`, nothing empty, so a manifest can never write outside the folder it is
unpacked into.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from fetchwork.errors import TransferError

# The versions of the packed form: 2 when a file's bytes are inline.
_VERSION = 1
_VERSION_INLINE = 2


@dataclass(frozen=True)
class FileEntry:
    """One file of a sandbox."""

    name: str
    mode: int
    size: int
    sha256: str
    chunks: tuple[str, ...]
    # A small file's bytes, carried in the manifest itself (then no chunks).
    data: bytes | None = None


@dataclass(frozen=True)
class UrlEntry:
    """A file the execute side fetches from `url` (input) or sends to it (output)."""

    url: str
    name: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...] = ()
    dirs: tuple[str, ...] = ()
    urls: tuple[UrlEntry, ...] = ()
    # For outputs: names the job was asked for and did not make (kept for the log).
    notes: tuple[str, ...] = field(default=())

    @property
    def size(self) -> int:
        """Bytes of its files."""
        return sum(entry.size for entry in self.files)

    @property
    def inline_bytes(self) -> int:
        """Bytes of the files carried inside the manifest."""
        return sum(len(entry.data) for entry in self.files if entry.data is not None)

    def digests(self) -> list[str]:
        """Its distinct chunk digests, in order of first use."""
        return list(dict.fromkeys(digest for entry in self.files for digest in entry.chunks))

    def pack(self) -> bytes:
        inline = any(entry.data is not None for entry in self.files)
        return msgpack.packb({
            "v": _VERSION_INLINE if inline else _VERSION,
            "files": [[e.name, e.mode, e.size, e.sha256, list(e.chunks),
                       *([e.data] if inline else [])] for e in self.files],
            "dirs": list(self.dirs),
            "urls": [[u.url, u.name] for u in self.urls],
            "notes": list(self.notes),
        }, use_bin_type=True)

    def ident(self) -> str:
        """The manifest's id: the SHA-256 of its packed form."""
        return hashlib.sha256(self.pack()).hexdigest()


def unpack(data: bytes) -> Manifest:
    """A manifest from its packed form; TransferError when it is not one."""
    try:
        raw = msgpack.unpackb(data, raw=False)
        if not isinstance(raw, dict) or raw.get("v") not in (_VERSION, _VERSION_INLINE):
            raise ValueError("unknown version")
        width = 6 if raw["v"] == _VERSION_INLINE else 5
        files = tuple(_entry(row, width) for row in raw["files"])
        dirs = tuple(check_name(name) for name in raw["dirs"])
        urls = tuple(UrlEntry(str(url), check_name(name)) for url, name in raw["urls"])
        notes = tuple(str(note) for note in raw.get("notes", []))
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise TransferError(f"a stored manifest is unreadable: {exc}") from exc
    return Manifest(files, dirs, urls, notes)


def _entry(row: list[Any], width: int) -> FileEntry:
    """One packed file row; ValueError when it is malformed."""
    if not isinstance(row, list) or len(row) != width:
        raise ValueError("a file entry is malformed")
    name, mode, size, sha, chunks = row[:5]
    data = row[5] if width == 6 else None
    entry = FileEntry(check_name(name), int(mode), int(size), str(sha),
                      tuple(str(d) for d in chunks), data)
    if data is not None and (not isinstance(data, bytes) or entry.chunks):
        raise ValueError(f"{entry.name}: an inline file is malformed")
    return entry


def check_name(name: str) -> str:
    """`name` when it is a safe relative path inside a sandbox; TransferError naming it
    otherwise (absolute, `..`, empty, a NUL)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise TransferError(f"{name!r} is not a file name")
    if name.startswith("/"):
        raise TransferError(f"{name}: an absolute name cannot be transferred into a sandbox")
    parts = name.split("/")
    if ".." in parts:
        raise TransferError(f"{name}: a name with '..' could reach outside the sandbox")
    normal = posixpath.normpath(name)
    if normal in (".", "") or normal.startswith("../"):
        raise TransferError(f"{name!r} names no file inside the sandbox")
    return normal


def parents(names: Iterable[str]) -> list[str]:
    """Every folder the names need, parents first."""
    found: dict[str, None] = {}
    for name in names:
        parent = posixpath.dirname(name)
        chain: list[str] = []
        while parent:
            chain.append(parent)
            parent = posixpath.dirname(parent)
        for folder in reversed(chain):
            found.setdefault(folder)
    return list(found)
