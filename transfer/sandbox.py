"""The execute side's transfer step, run by the starter (starter/transferstep.py)
in its own process, or in a child it forks:

    answer_here("input" | "output", SANDBOX, (UID, GID) | None, AD, stop=...)
    answer("input" | "output", SANDBOX, "UID:GID" | None, AD_TEXT)      # the child

Both use the pool's client the starter made ahead (`prepare`; the child makes a
connection of its own on it, or reads the configuration when there is none).
Every file of the sandbox is read and written as the job's user, never as
root: in the starter's process with the user's effective ids around the file
work (privstate.as_user, given back after) when the starter is root; in the
child after it became that user for good (`become`). A transfer that runs
programs (URL plugins) or a big input is refused by `run_here` before any file
work (NeedsChild), and goes to the child. `input` writes the job's input
sandbox into SANDBOX (each chunk and file checked) and records what arrived;
`output` sends back what the job made (transfer/outputs.py decides which) and
attaches it as the job's output manifest. The answer is `{"ok": true,
"attrs": {...}}` with the attributes for the job ad, or `{"ok": false, "code":
12|13|32|33, "subcode": N, "reason": "..."}` for the hold; for a job with a
user log, its transfer events go to the pool's stream.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import redis

from fetchwork.broker.connections.clients import connect
from fetchwork.broker.store import Store, calls
from fetchwork.config.ads import parse_ad, to_dict
from fetchwork.config.loader import Config, get_config
from fetchwork.config.protocol import HoldCode
from fetchwork.errors import (
    FetchworkError,
    RedisUnavailableError,
    SubmitError,
    TransferError,
)

from . import checkedfill, inline, privstate, safefiles, stored
from .cache import CacheError, ChunkCache
from .chunkget import ChunkGetter
from .chunks import ChunkStore
from .delivery import OUTPUT_MANIFEST_ATTR
from .inputs import INPUT_MANIFEST_ATTR
from .manifest import FileEntry, Manifest, UrlEntry
from .outputs import (
    SNAPSHOT_FILE,
    SYSTEM_FILES,
    Found,
    Planned,
    list_sandbox,
    plan_outputs,
)
from .plugins import (
    Direction,
    FileTransfer,
    PluginError,
    PluginRegistry,
    plugin_lifetime_s,
    run_plugin,
)
from .sandboxfill import Rights, SandboxFill

log = logging.getLogger(__name__)

MB = 1024 * 1024
# prctl(PR_SET_PDEATHSIG): a transfer dies with its starter, a plugin with its transfer.
_PR_SET_PDEATHSIG = 1
# prctl(PR_SET_NAME): the name `ps -o comm`, `top` and `pgrep` show (15 bytes at most).
_PR_SET_NAME, _PR_GET_NAME = 15, 16
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
# The Lua scripts the transfer steps call.
SCRIPTS = ("transfer_chunk", "transfer_attach", "transfer_event", "transfer_detach")
# Chunks fetched ahead into the machine's cache while the one before is checked.
FETCH_AHEAD = 2
# The job's last checkpoint (ON_EXIT_OR_EVICT): the manifest of its evicted sandbox.
CHECKPOINT_ATTR = "FetchworkCheckpointManifest"


def _machine_cache(config: Config) -> ChunkCache | None:
    """The machine's chunk cache, or None (logged) when it cannot be used."""
    try:
        return ChunkCache.from_config(config)
    except (OSError, FetchworkError) as exc:
        log.warning("the machine's chunk cache is not usable: %s", exc)
        return None


def chunked(manifest: Manifest) -> tuple[FileEntry, ...]:
    """The manifest's files that travel as chunks (the others are inside it)."""
    return tuple(entry for entry in manifest.files if entry.data is None)


def writer(chunk_store: ChunkStore, entry: FileEntry) -> Callable[[int], None]:
    """What writes `entry` into a descriptor, checked: its inline bytes, or its chunks."""
    if entry.data is not None:
        return inline.fill(entry)
    return functools.partial(chunk_store.download, entry)


def _fill(cache: ChunkCache, store: Store, manifest: Manifest,
          early: SandboxFill | None = None) -> int:
    """Put the manifest's chunks the cache lacks into it, as the starter's account (the
    job's user may read the cache, never write it), each chunk and each file checked
    on the way (TransferError names a file that does not check); the bytes fetched.
    With `early`, the files of several chunks are written into the sandbox meanwhile,
    under hidden names, as the job's user (transfer/sandboxfill.py)."""
    def fetch(digest: str) -> bytes | None:
        data = store.client.get(store.keys.xfer_chunk(digest))
        return data if isinstance(data, bytes) else None

    # A file of several chunks is read into reused buffers on a connection of its own;
    # small files (a chunk each) come through the client, with no buffer to make.
    getter = ChunkGetter(store)
    files = chunked(manifest)
    big = any(len(entry.chunks) > 1 for entry in files)
    try:
        return checkedfill.fill_checked(cache, files, fetch, ahead=FETCH_AHEAD,
                                        fetch_into=getter.get_into if big else None,
                                        sandbox=early)
    except (OSError, CacheError) as exc:
        log.warning("cannot fill the machine's chunk cache: %s; reading from the pool", exc)
        if early is not None:
            early.close()  # every file is written the plain way
        return 0
    finally:
        getter.close()


class Step:
    """One transfer of one job, input or output."""

    def __init__(self, config: Config, store: Store, ad: Mapping[str, Any], sandbox: str,
                 check: Callable[[], None] = lambda: None):
        self.config = config
        # Called before each file: raises to end the transfer (a stop request).
        self.check = check
        self.store = store
        self.ad = ad
        self.sandbox = sandbox
        cluster, proc = ad.get("ClusterId"), ad.get("ProcId")
        self.job_id = f"{cluster}.{proc}"
        self.host = str(ad.get("RemoteHost") or socket.gethostname())
        # The machine's plugins, looked up before the switch of user (when URLs are
        # involved: each lookup runs every plugin once).
        self.registry: PluginRegistry | None = None
        # The transfer's events feed only the job's user log (HTCondor's event 040;
        # nothing else reads them): a job without one records none, which spares
        # the pool a round trip per step and every reader of the stream its entries.
        self.logged = logs_events(ad)

    def find_plugins(self) -> None:
        self.registry = PluginRegistry.from_config(self.config, dict(os.environ))

    def event(self, kind: str, **fields: Any) -> None:
        if not self.logged:
            return
        try:
            calls.transfer_event(self.store, job_id=self.job_id, kind=kind,
                                 fields=[(k, str(v)) for k, v in fields.items()])
        except Exception as exc:  # noqa: BLE001 - the log entry must not fail the transfer
            log.warning("job %s: cannot record the %s event: %s", self.job_id, kind, exc)

    def events(self, kinds: Sequence[str], **fields: Any) -> None:
        """Events `kinds` with the same `fields` in one round trip (a transfer's queued
        and started events: it starts as it is queued)."""
        if not self.logged:
            return
        listed = [(k, str(v)) for k, v in fields.items()]
        try:
            with self.store.client.pipeline(transaction=False) as pipe:
                for kind in kinds:
                    calls.queue_transfer_event(self.store, pipe, job_id=self.job_id,
                                               kind=kind, fields=listed)
                pipe.execute()
            return
        except redis.exceptions.NoScriptError:  # Redis lost its scripts: one at a time
            self.store.scripts.forget()
        except Exception as exc:  # noqa: BLE001 - the log entry must not fail the transfer
            log.warning("job %s: cannot record the %s events: %s", self.job_id,
                        " and ".join(kinds), exc)
            return
        for kind in kinds:
            self.event(kind, **fields)

    # -- input ----------------------------------------------------------------

    def manifest(self) -> Manifest:
        """The job's input manifest (an empty one when it sends nothing)."""
        ident = self.ad.get(INPUT_MANIFEST_ATTR)
        return (stored.load(self.store, ident) if isinstance(ident, str) and ident
                else Manifest())

    def inputs(self, manifest: Manifest, cache: ChunkCache | None,
               cached_bytes: int, early: SandboxFill | None = None) -> dict[str, Any]:
        limit = self.ad.get("MaxTransferInputMB")
        if isinstance(limit, int | float) and limit > 0 and manifest.size > limit * MB:
            raise TransferError(f"the input files are {manifest.size / MB:.1f} MB, more than "
                                f"MaxTransferInputMB = {limit}",
                                HoldCode.MAX_TRANSFER_INPUT_SIZE_EXCEEDED)
        chunk_store = ChunkStore(self.store, 0, cache)
        code = HoldCode.TRANSFER_INPUT_ERROR
        for folder in manifest.dirs:
            safefiles.make_folder(self.sandbox, folder, code)
        for stream in ("Out", "Err"):  # the job writes them there; make their folders
            name = self.ad.get(stream)
            if isinstance(name, str) and "/" in name and not name.startswith("/"):
                safefiles.make_folder(self.sandbox, name.rpartition("/")[0], code)
        for entry in manifest.files:
            self.check()
            if early is not None and early.place(entry.name):
                continue  # written as it arrived, checked whole: renamed into place
            safefiles.write_file(self.sandbox, entry.name, entry.mode,
                                 writer(chunk_store, entry), code)
        url_bytes = self._urls(list(manifest.urls), Direction.DOWNLOAD, code)
        restored = self._restore(chunk_store, code)
        self._snapshot()
        from_pool = chunk_store.received_bytes + cached_bytes + manifest.inline_bytes
        return {"BytesRecvd": float(from_pool + url_bytes),
                "TransferInputSizeMB": int((manifest.size + url_bytes + MB - 1) // MB),
                "TransferInputStats": {"FetchworkFilesCount": len(manifest.files),
                                       "CheckpointFilesCount": restored,
                                       "FetchworkSizeBytes": manifest.size,
                                       "FetchworkBytesFromPool": from_pool,
                                       "UrlFilesCount": len(manifest.urls),
                                       "UrlSizeBytes": url_bytes}}

    def _restore(self, chunk_store: ChunkStore, code: int) -> int:
        """Write the job's last checkpoint over its inputs; how many files it held."""
        ident = self.ad.get(CHECKPOINT_ATTR)
        if not isinstance(ident, str) or not ident:
            return 0
        saved = stored.load(self.store, ident)
        for folder in saved.dirs:
            safefiles.make_folder(self.sandbox, folder, code)
        for entry in saved.files:
            self.check()
            safefiles.write_file(self.sandbox, entry.name, entry.mode,
                                 writer(chunk_store, entry), code)
        log.info("job %s: restored %d file(s) of its checkpoint", self.job_id, len(saved.files))
        return len(saved.files)

    def checkpoint(self) -> dict[str, Any]:
        """Save the evicted job's sandbox (every file new or changed since its inputs
        arrived, in every folder) as its checkpoint, replacing the one before."""
        code = HoldCode.TRANSFER_OUTPUT_ERROR
        arrived = self._arrived()
        chunk_store = ChunkStore(self.store, int(self.config.get_duration_s(
            "TRANSFER_PENDING_LIFETIME") * 1000))
        entries: list[FileEntry] = []
        for name, found in sorted(list_sandbox(self.sandbox).items()):
            if found.kind != "f" or name in SYSTEM_FILES or arrived.get(name) == found:
                continue
            with safefiles.open_file(self.sandbox, name, code) as (fd, info):
                entries.append(chunk_store.upload(fd, name, info.st_mode & 0o777))
        manifest = Manifest(tuple(entries))

        def resend(_missing: list[str]) -> None:
            for entry in entries:
                with safefiles.open_file(self.sandbox, entry.name, code) as (fd, _info):
                    chunk_store.upload(fd, entry.name, entry.mode)

        try:
            ident = stored.attach(self.store, manifest, 1, stored.pool_cap_bytes(self.store),
                                  resend)
        except SubmitError as exc:
            raise TransferError(f"the checkpoint cannot be kept: {exc}", code) from exc
        previous = self.ad.get(CHECKPOINT_ATTR)
        if isinstance(previous, str) and previous:
            stored.detach(self.store, previous, 1)
        log.info("job %s: saved %d file(s) as its checkpoint", self.job_id, len(entries))
        return {CHECKPOINT_ATTR: ident, "BytesSent": float(chunk_store.sent_bytes)}

    def _urls(self, items: list[UrlEntry], direction: Direction, code: int) -> int:
        """Run the plugins for URL transfers (one run per plugin); the bytes moved.
        A failure is TransferError naming the file, the plugin's exit code its subcode."""
        if not items:
            return 0
        env = dict(os.environ)
        try:
            if self.registry is None:
                raise PluginError("no plugin was looked up for this transfer")
            registry = self.registry.with_job(str(self.ad.get("TransferPlugins") or ""),
                                              Path(self.sandbox))
            batches: dict[Path, tuple[Any, list[FileTransfer]]] = {}
            for item in items:
                plugin = registry.plugin_for(item.url)
                batches.setdefault(plugin.path, (plugin, []))[1].append(
                    FileTransfer(item.url, item.name))
            moved = 0
            for plugin, files in batches.values():
                run_ = run_plugin(plugin, files, folder=Path(self.sandbox), direction=direction,
                                  env=env, timeout_s=plugin_lifetime_s(self.config),
                                  preexec_fn=_plugin_dies_with_us)
                if not run_.ok:
                    raise TransferError(run_.failure(), code, run_.exit_code)
                moved += sum(result.total_bytes or 0 for result in run_.results)
            return moved
        except PluginError as exc:
            raise TransferError(str(exc), code, exc.exit_code or 0) from exc

    def _snapshot(self) -> None:
        listing = {name: [found.kind, found.size, found.mtime_ns]
                   for name, found in list_sandbox(self.sandbox).items()}
        text = json.dumps(listing).encode()
        def write(fd: int) -> None:
            os.write(fd, text)

        safefiles.write_file(self.sandbox, SNAPSHOT_FILE, 0o600, write,
                             HoldCode.TRANSFER_INPUT_ERROR)

    def _arrived(self) -> dict[str, Found]:
        try:
            with safefiles.open_file(self.sandbox, SNAPSHOT_FILE,
                                     HoldCode.TRANSFER_OUTPUT_ERROR) as (fd, info):
                raw = json.loads(os.read(fd, info.st_size + 1))
            return {name: Found(kind, size, mtime) for name, (kind, size, mtime) in raw.items()}
        except (TransferError, ValueError, TypeError):
            return {}

    # -- output ---------------------------------------------------------------

    def outputs(self) -> dict[str, Any]:
        code = HoldCode.TRANSFER_OUTPUT_ERROR
        planned = plan_outputs(self.ad, list_sandbox(self.sandbox), self._arrived())
        destination = str(self.ad.get("OutputDestination") or "").strip()
        if destination:  # the whole output sandbox goes there, through a plugin
            planned = [Planned(item.source, f"{destination.rstrip('/')}/{item.target}")
                       for item in planned]
        uploads = [item for item in planned if item.to_url]
        planned = [item for item in planned if not item.to_url]
        url_bytes = self._urls([UrlEntry(item.target, item.source) for item in uploads],
                               Direction.UPLOAD, code)
        chunk_store = ChunkStore(self.store, int(self.config.get_duration_s(
            "TRANSFER_PENDING_LIFETIME") * 1000), hold_small=True)
        limit = self.ad.get("MaxTransferOutputMB")
        entries: list[FileEntry] = []
        total = 0
        budget = inline.Budget()  # the smallest files travel inside the manifest
        for item in planned:
            with safefiles.open_file(self.sandbox, item.source, code) as (fd, info):
                total += info.st_size
                if isinstance(limit, int | float) and limit > 0 and total > limit * MB:
                    raise TransferError(
                        f"{item.source}: the output files pass MaxTransferOutputMB = {limit}",
                        HoldCode.MAX_TRANSFER_OUTPUT_SIZE_EXCEEDED)
                mode = info.st_mode & 0o777
                entries.append(budget.read(fd, info.st_size, item.target, mode)
                               or chunk_store.upload(fd, item.target, mode))
        chunk_store.flush()  # the other small files, in one round trip
        manifest = Manifest(tuple(entries))
        cap_bytes, lifetime_s = stored.output_rules(self.store)

        def resend(_missing: list[str]) -> None:
            for entry, item in zip(entries, planned, strict=True):
                if entry.data is not None:
                    continue  # inside the manifest: nothing to send again
                with safefiles.open_file(self.sandbox, item.source, code) as (fd, info):
                    chunk_store.upload(fd, item.target, info.st_mode & 0o777)
            chunk_store.flush()

        try:
            ident = stored.attach(self.store, manifest, 1, cap_bytes, resend,
                                  output_of=self.job_id,
                                  expires_s=int(time.time() + lifetime_s))
        except SubmitError as exc:
            raise TransferError(f"the outputs cannot be kept: {exc}", code) from exc
        return {OUTPUT_MANIFEST_ATTR: ident,
                "BytesSent": float(chunk_store.sent_bytes + manifest.inline_bytes
                                   + url_bytes),
                "TransferOutputStats": {"FetchworkFilesCount": len(entries),
                                        "FetchworkSizeBytes": manifest.size,
                                        "UrlFilesCount": len(uploads),
                                        "UrlSizeBytes": url_bytes}}


def logs_events(ad: Mapping[str, Any]) -> bool:
    """Whether the job's transfer steps go on the pool's event stream: only for a job
    with a user log (`log =`), the one reader of those entries (pure)."""
    path = ad.get("UserLog")
    return isinstance(path, str) and bool(path.strip())


def _urls_out(ad: Mapping[str, Any]) -> bool:
    """Whether the job's outputs may go to URLs (remaps to URLs, OutputDestination)."""
    return "://" in str(ad.get("TransferOutputRemaps") or "") or bool(
        str(ad.get("OutputDestination") or "").strip())


def die_with_parent() -> None:
    """Be killed when the starter dies (a startd killed mid-transfer takes its starters
    with it): nothing half-sent is then attached, and the job runs again elsewhere.
    A change of user clears this, so it is asked again after `become`."""
    if _LIBC is None:
        return
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the starter died before the request took
        os._exit(1)


def name_process(direction: str) -> None:
    """Show the forked transfer as `fw-xfer-input` or `fw-xfer-output` in `ps` and
    `top`, rather than as another starter."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_NAME, f"fw-xfer-{direction}".encode()[:15], 0, 0, 0)


def process_name() -> bytes:
    """This thread's name as `ps -o comm` shows it (b"" when it cannot be read)."""
    if _LIBC is None:
        return b""
    name = ctypes.create_string_buffer(16)
    _LIBC.prctl(_PR_GET_NAME, name, 0, 0, 0)
    return name.value


def restore_name(name: bytes) -> None:
    """Give back the name `process_name` read."""
    if _LIBC is not None and name:
        _LIBC.prctl(_PR_SET_NAME, name[:15], 0, 0, 0)


def _plugin_dies_with_us() -> None:
    """In a plugin's child before its exec: killed when this transfer is (a plugin runs
    in a session of its own, so a kill of ours would not reach it)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def become(user: str | None) -> None:
    """Become the job's user (`UID:GID`) when started as root; never stay root."""
    if os.geteuid() != 0:
        return
    if not user:
        raise TransferError("the transfer step was started as root without the job's user")
    uid, _, gid = user.partition(":")
    os.setgroups([int(gid)])
    os.setgid(int(gid))
    os.setuid(int(uid))
    if os.geteuid() == 0 or os.getuid() == 0:
        raise TransferError("could not leave root")
    die_with_parent()


# The pool's client a starter made for its transfers (`prepare`), inherited by the
# children it forks for them.
_prepared: tuple[Config, Store] | None = None


def _new_store(config: Config) -> Store:
    pool = config.require("FETCHWORK_POOL").strip()
    return Store(connect(config, start=False, pool=pool), pool,
                 config.get_int("BROKER_EVENTS_MAXLEN"))


def prepare(config: Config) -> None:
    """In the starter, before its first transfer: make the pool's client once (its
    credentials read, the transfer scripts loaded) and keep it. A transfer run in the
    starter's own process uses its connection; a forked child makes a connection of
    its own on it (redis-py does in a new process) instead of reading the
    configuration and credentials and loading the scripts again. Best effort: when
    the pool cannot be reached now, the transfer runs in a child that tries on its
    own and answers for it."""
    global _prepared
    if _prepared is not None and _prepared[0] is config:
        return
    if _prepared is not None:  # another job's configuration: its client goes
        _prepared[1].client.close()
    try:
        store = _new_store(config)
        store.scripts.ensure_loaded_together(SCRIPTS)
    except (redis.RedisError, FetchworkError, OSError) as exc:
        log.debug("the transfer's pool client is made in its child: %s", exc)
        _prepared = None
        return
    _prepared = (config, store)


class NeedsChild(Exception):  # noqa: N818 - a way out, not an error
    """The transfer runs programs (URL plugins): it belongs in a forked child that
    gives up root for good, never in the starter's own process."""


class Stopped(Exception):  # noqa: N818 - a way out, not an error
    """A stop request ended the transfer run in the starter's own process."""


# Inputs larger than this are fetched in a forked child, whose kill ends them at
# once: in the starter's own process a stop is seen between files only, and the
# fork's few milliseconds are nothing beside the transfer of that many bytes.
IN_PROCESS_MAX_BYTES = 16 * MB


def _client() -> tuple[Config, Store]:
    if _prepared is not None:  # made by the starter this process is or was forked from
        config, store = _prepared
        store.client.ping()
        return config, store
    config = get_config()
    return config, _new_store(config)


def _gave_up(user: str | None) -> contextlib.AbstractContextManager[None]:
    become(user)  # for good: a forked child never takes root back
    return contextlib.nullcontext()


def run(direction: str, sandbox: str, user: str | None, ad_text: str,
        evicted: bool = False) -> dict[str, Any]:
    """The transfer in a forked child: connected, it becomes the job's user for good."""
    die_with_parent()
    ad = to_dict(parse_ad(ad_text, "job ad"))
    config, store = _client()
    return _transfer(config, store, direction, sandbox, ad, evicted,
                     rights=lambda: _gave_up(user), borrow=_borrowed(user))


def _borrowed(user: str | None) -> Rights | None:
    """In a child still root: the job's user's rights (`UID:GID`) for a moment on the
    calling thread only (transfer/privstate.py), for the files written while the cache
    fills; nothing to take once the child is that user. None where they cannot be
    taken that way (the files are then written after the fill)."""
    if os.geteuid() != 0:
        return contextlib.nullcontext
    if not user or not privstate.per_thread():
        return None
    uid, _, gid = user.partition(":")
    ids = (int(uid), int(gid))

    def rights() -> contextlib.AbstractContextManager[None]:
        return privstate.as_user(ids) if os.geteuid() == 0 else contextlib.nullcontext()
    return rights


def run_here(direction: str, sandbox: str, user: tuple[int, int] | None,
             ad: Mapping[str, Any], evicted: bool = False,
             stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """The transfer in this process (the starter's own), on its pool client: the file
    work with the job's user's effective ids when this process is root
    (privstate.as_user), as itself otherwise. NeedsChild, before any file work, when
    the transfer must run in a forked child instead (it runs plugins, or is a big
    input); Stopped when `stop()` said so between two files."""
    if _prepared is None:
        raise NeedsChild("no pool client made ahead")
    config, store = _prepared

    def rights() -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if user is None else privstate.as_user(user)

    def check() -> None:
        if stop():
            raise Stopped(f"a stop request ended the {direction} transfer")

    borrow = rights if user is None or privstate.per_thread() else None
    return _transfer(config, store, direction, sandbox, ad, evicted, rights, here=True,
                     check=check, borrow=borrow)


def _transfer(config: Config, store: Store, direction: str, sandbox: str,
              ad: Mapping[str, Any], evicted: bool,
              rights: Rights, here: bool = False, check: Callable[[], None] = lambda: None,
              borrow: Rights | None = None) -> dict[str, Any]:
    """One transfer: `rights` are the job's user's for the file work (for good in a
    child); `borrow` the same for a moment on one thread, for the files written into
    the sandbox while the machine's cache fills (None: after it)."""
    # Credentials are read, the connection made and the scripts loaded before the
    # file work: the job's user may not read the files they come from.
    store.scripts.ensure_loaded_together(SCRIPTS)
    step = Step(config, store, ad, sandbox, check)
    manifest, cache, cached_bytes = Manifest(), None, 0
    if direction == "input":
        manifest = step.manifest()
    programs = bool(manifest.urls) or (direction == "output" and not evicted
                                       and _urls_out(ad))
    if here and (programs or manifest.size > IN_PROCESS_MAX_BYTES):
        raise NeedsChild("plugins to run" if programs else "a big input")
    early: SandboxFill | None = None
    try:
        if direction == "input" and chunked(manifest):
            # (Inputs all inside their manifest need neither the cache nor its set-up.)
            cache = _machine_cache(config)
            if cache is not None:
                early = _early_writes(sandbox, manifest, ad, borrow)
                cached_bytes = _fill(cache, store, manifest, early)
        if programs:
            step.find_plugins()
        with rights():
            return _steps(step, direction, manifest, cache, cached_bytes, evicted, early)
    finally:
        if early is not None:
            early.close()  # whatever was not renamed into place


def _early_writes(sandbox: str, manifest: Manifest, ad: Mapping[str, Any],
                  borrow: Rights | None) -> SandboxFill | None:
    """The writer of the manifest's files of several chunks into the sandbox as they
    arrive, or None: no such file, no way to take the job's user's rights on one
    thread, or inputs past MaxTransferInputMB (refused before any file is written)."""
    limit = ad.get("MaxTransferInputMB")
    if borrow is None or not any(len(entry.chunks) > 1 for entry in chunked(manifest)) or (
            isinstance(limit, int | float) and limit > 0 and manifest.size > limit * MB):
        return None
    return SandboxFill(sandbox, borrow, HoldCode.TRANSFER_INPUT_ERROR)


def _steps(step: Step, direction: str, manifest: Manifest, cache: ChunkCache | None,
           cached_bytes: int, evicted: bool,
           early: SandboxFill | None = None) -> dict[str, Any]:
    """The transfer's file work with its user log events, as the job's user."""
    started = time.monotonic()
    step.events((f"{direction}_queued", f"{direction}_started"), host=step.host)
    try:
        if direction == "input":
            attrs = step.inputs(manifest, cache, cached_bytes, early)
        elif evicted:
            attrs = step.checkpoint()
        else:
            attrs = step.outputs()
    except (TransferError, OSError, Stopped):
        step.event(f"{direction}_finished", host=step.host, success="false",
                   seconds=f"{time.monotonic() - started:.3f}")
        raise
    size = attrs.get("TransferInputStats", attrs.get("TransferOutputStats", {}))
    step.event(f"{direction}_finished", host=step.host, success="true",
               bytes=size.get("FetchworkSizeBytes", 0),
               seconds=f"{time.monotonic() - started:.3f}")
    return attrs


def answer(direction: str, sandbox: str, user: str | None, ad_text: str,
           evicted: bool = False) -> dict[str, Any]:
    """Run one transfer in a forked child (`run`) and turn how it ended into the
    starter's answer: `{"ok": true, "attrs": {...}}`, or `{"ok": false, "code",
    "subcode", "reason"}` for the hold (`"retry": true` when the pool was
    unreachable)."""
    return _answered(direction, lambda: run(direction, sandbox, user, ad_text, evicted))


def answer_here(direction: str, sandbox: str, user: tuple[int, int] | None,
                ad: Mapping[str, Any], evicted: bool = False,
                stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """`answer` for a transfer run in this process (`run_here`); NeedsChild and
    Stopped go through to the caller."""
    return _answered(direction, lambda: run_here(direction, sandbox, user, ad, evicted,
                                                 stop))


def _answered(direction: str, transfer: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    default = (HoldCode.TRANSFER_INPUT_ERROR if direction == "input"
               else HoldCode.TRANSFER_OUTPUT_ERROR)
    try:
        return {"ok": True, "attrs": transfer()}
    except (redis.ConnectionError, redis.TimeoutError, RedisUnavailableError) as exc:
        # The pool's Redis went away mid-transfer: nothing half-sent is attached; the
        # job goes back to the queue and runs again, it is not the job's fault.
        return {"ok": False, "retry": True, "code": int(default), "subcode": 0,
                "reason": f"Transfer {direction} files interrupted: the pool's Redis "
                          f"is unreachable ({exc})"}
    except TransferError as exc:
        return {"ok": False, "code": int(exc.code), "subcode": exc.subcode,
                "reason": f"Transfer {direction} files failed: {exc}"}
    except (FetchworkError, OSError) as exc:
        return {"ok": False, "code": int(default), "subcode": getattr(exc, "errno", 0) or 0,
                "reason": f"Transfer {direction} files failed: {exc}"}
