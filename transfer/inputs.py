"""The submit side's upload of input sandboxes (HTCondor's spooling): what each job
sends (`input_plan`, pure) and sending it (`upload_inputs`).

A job sends its executable (unless `transfer_executable = false`), its `input`
file and every item of `transfer_input_files`, resolved against its `Iwd`: a
file as its base name, a folder `dir` as the folder itself and `dir/` as what
it holds, as HTCondor does; with `preserve_relative_paths` a relative item keeps
its path. A URL is not read here: the execute side fetches it through a plugin.
Files are read and sent at submit time, so they may change or vanish after
`submit` returns. Jobs with the same inputs share one manifest; a file named by
several manifests is read once.
"""

from __future__ import annotations

import logging
import os
import posixpath
import stat
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fetchwork.broker.store import Store
from fetchwork.errors import SubmitError, TransferError

from . import stored
from .chunks import ChunkStore
from .inline import Budget
from .manifest import FileEntry, Manifest, UrlEntry, check_name

log = logging.getLogger(__name__)

INPUT_MANIFEST_ATTR = "FetchworkInputManifest"


@dataclass(frozen=True)
class Source:
    """A file to send: its path here and its name in the sandbox."""

    path: str
    name: str


@dataclass(frozen=True)
class InputPlan:
    files: tuple[Source, ...]
    dirs: tuple[str, ...]
    urls: tuple[UrlEntry, ...]


def transfers(ad: Mapping[str, Any]) -> bool:
    """Whether the job sends files (ShouldTransferFiles YES or IF_NEEDED)."""
    return str(ad.get("ShouldTransferFiles", "NO")).upper() != "NO"


def split_list(text: str) -> list[str]:
    """An HTCondor file list: comma-separated, blanks around items ignored."""
    return [item.strip() for item in text.split(",") if item.strip()]


def is_url(item: str) -> bool:
    scheme, sep, _ = item.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum()


def url_name(url: str) -> str:
    """The name a URL's file gets in the sandbox: the last part of its path."""
    path = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    return posixpath.basename(path.rstrip("/")) or "index"


def _fail(command: str, message: str) -> SubmitError:
    return SubmitError(f"{command}: {message}")


def input_plan(ad: Mapping[str, Any]) -> InputPlan:
    """What one job sends (reads only the file system's names and kinds)."""
    iwd = str(ad.get("Iwd") or os.getcwd())
    files: list[Source] = []
    dirs: list[str] = []
    urls: list[UrlEntry] = []
    preserve = ad.get("PreserveRelativePaths") is True
    if ad.get("TransferExecutable", True) is not False and isinstance(ad.get("Cmd"), str):
        cmd = os.path.join(iwd, ad["Cmd"])
        files.append(Source(cmd, posixpath.basename(cmd)))
    stdin = ad.get("In")
    if isinstance(stdin, str) and stdin and stdin != os.devnull:
        files.append(Source(os.path.join(iwd, stdin), _named("input", stdin)))
    # The job's own plugins travel in its sandbox under their names (`methods=path; ...`).
    for entry in str(ad.get("TransferPlugins") or "").split(";"):
        _methods, sep, plugin = entry.partition("=")
        if sep and plugin.strip() and not is_url(plugin.strip()):
            path = os.path.join(iwd, os.path.expanduser(plugin.strip()))
            if not os.access(path, os.R_OK):
                raise _fail("transfer_plugins", f"{path} cannot be read")
            files.append(Source(path, posixpath.basename(path)))
    for item in split_list(str(ad.get("TransferInput") or "")):
        if is_url(item):
            urls.append(UrlEntry(item, _named("transfer_input_files", url_name(item))))
            continue
        path = os.path.normpath(os.path.join(iwd, os.path.expanduser(item)))
        if not os.path.exists(path):
            raise _fail("transfer_input_files", f"{path} does not exist")
        if not os.access(path, os.R_OK):
            raise _fail("transfer_input_files", f"{path} cannot be read")
        kept = item.rstrip("/") if preserve and not os.path.isabs(item) else None
        if os.path.isdir(path):
            # `dir/` sends what the folder holds; `dir` the folder itself.
            base = (kept or "") if item.endswith("/") else (kept or os.path.basename(path))
            _walk(path, base, files, dirs)
        else:
            files.append(Source(path, _named("transfer_input_files",
                                             kept or os.path.basename(path))))
    names = [source.name for source in files] + [url.name for url in urls]
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise _fail("transfer_input_files", f"two inputs would both be {repeated[0]} in the "
                    "sandbox")
    return InputPlan(tuple(files), tuple(dirs), tuple(urls))


def _named(command: str, name: str) -> str:
    try:
        return check_name(name)
    except TransferError as exc:
        raise _fail(command, str(exc)) from exc


def _walk(top: str, base: str, files: list[Source], dirs: list[str]) -> None:
    """The files and folders under `top`, named under `base` ('' the sandbox's top)."""
    if base:
        dirs.append(_named("transfer_input_files", base))
    for root, subdirs, names in os.walk(top):
        subdirs.sort()
        relative = os.path.relpath(root, top)
        prefix = base if relative == "." else posixpath.join(base, relative)
        for sub in list(subdirs):
            if os.path.islink(os.path.join(root, sub)):
                log.warning("not sending %s: a link to a folder", os.path.join(root, sub))
                subdirs.remove(sub)
                continue
            dirs.append(_named("transfer_input_files", posixpath.join(prefix, sub)))
        for name in sorted(names):
            files.append(Source(os.path.join(root, name),
                                _named("transfer_input_files", posixpath.join(prefix, name))))


class Uploader:
    """Sends files into the pool, each distinct file read once per submission. With
    `inline`, a small file within the manifest's `budget` travels inside it
    (transfer/inline.py) instead of as a chunk (a person's staged inputs are
    chunks only: the leader checks each chunk it moves into the pool)."""

    def __init__(self, chunk_store: ChunkStore, inline: bool = False):
        self.chunk_store = chunk_store
        self.inline = inline
        self._sent: dict[tuple[int, int, int, int], FileEntry] = {}

    def forget(self) -> None:
        """Read every file again at the next send (its chunks lapsed in the pool)."""
        self._sent.clear()

    def send(self, source: Source, budget: Budget | None = None) -> FileEntry:
        try:
            fd = os.open(source.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _fail("transfer_input_files", f"{source.path}: {exc.strerror}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _fail("transfer_input_files", f"{source.path} is not a regular file")
            key = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
            known = self._sent.get(key)
            if known is not None and known.data is not None and (
                    budget is None or known.size > budget.left):
                known = None  # inline before; as chunks in this manifest
            if known is not None and known.data is not None and budget is not None:
                budget.left -= known.size
            if known is None and self.inline and budget is not None:
                known = budget.read(fd, info.st_size, source.name, stat.S_IMODE(info.st_mode))
            if known is None:
                known = self.chunk_store.upload(fd, source.name, stat.S_IMODE(info.st_mode))
            self._sent[key] = known
            return replace(known, name=source.name, mode=stat.S_IMODE(info.st_mode))
        finally:
            os.close(fd)


@dataclass
class Uploaded:
    """The manifests a submission attached: detach them if it is not queued after all."""

    store: Store
    counts: dict[str, int]

    def rollback(self) -> None:
        for ident, jobs in self.counts.items():
            try:
                stored.detach(self.store, ident, jobs)
            except Exception:  # noqa: BLE001 - the submission's own error is the one to see
                log.exception("could not release the inputs of a failed submission")


def upload_inputs(store: Store, ads: Sequence[dict[str, Any]], cap_bytes: int,
                  pending_ms: int, say: Callable[[str], None] = log.info) -> Uploaded:
    """Send the inputs of every transferring job of `ads`, attach one manifest per
    distinct input sandbox (counted by its jobs) and name it in each ad."""
    uploader = Uploader(ChunkStore(store, pending_ms), inline=True)
    plans: dict[InputPlan, list[dict[str, Any]]] = {}
    for ad in ads:
        if transfers(ad):
            plans.setdefault(input_plan(ad), []).append(ad)
    uploaded = Uploaded(store, {})
    try:
        for plan, jobs in plans.items():
            budget = Budget()
            manifest = Manifest(tuple(uploader.send(source, budget) for source in plan.files),
                                plan.dirs, plan.urls)

            def resend(_missing: list[str], plan: InputPlan = plan) -> None:
                uploader.forget()
                again = Budget()
                for source in plan.files:
                    uploader.send(source, again)

            ident = stored.attach(store, manifest, len(jobs), cap_bytes, resend)
            uploaded.counts[ident] = uploaded.counts.get(ident, 0) + len(jobs)
            for ad in jobs:
                ad[INPUT_MANIFEST_ATTR] = ident
    except BaseException:
        uploaded.rollback()
        raise
    if plans:
        sent = uploader.chunk_store.sent_bytes
        resends = uploader.chunk_store.resends
        say(f"sent the inputs of {sum(len(j) for j in plans.values())} job(s): "
            f"{len(plans)} sandbox(es), {sent / (1024 * 1024):.1f} MB new to the pool"
            + (f" ({resends} dropped connection(s) to the pool resumed)" if resends else ""))
    return uploaded
