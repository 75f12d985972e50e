"""The execute machine's chunk cache: chunks it has fetched, by SHA-256 digest.

A file travels through the broker as content-addressed chunks. Each execute
machine keeps the chunks it fetched in one folder (`TRANSFER_CACHE_DIR`),
shared by its slots' starters and kept for a glide-in's whole life, so many
jobs that share an input cost the machine one download. The folder is bounded
(`TRANSFER_CACHE_MAX_MB`): past it, the least recently used chunks go.

Layout: `<root>/<first two hex digits>/<digest>`, one file per chunk, plus
`<root>/tmp/` (chunks being written), `<root>/.lock` and `<root>/.usage`
(the bytes held, so a put need not walk the folder).

Who may write: the cache is written only by the account the startd and its
starters run as (root, or a glide-in's own user), which is the account that
fetches chunks from the pool; a job's user never holds the pool's credentials.
A transfer that runs as the job's user fills the cache first (`fill`), while it
is still that account, then reads the chunks as the job's user.
Folders are 0755 and chunks 0444, owned by that account: a job's user (or a
starter already switched to it) can read every chunk, link or copy it into its
sandbox, but cannot create, replace, rename or delete one, so it cannot forge a
chunk another job will trust, nor swap one after it was checked. A `put` by an
account that cannot write the folder fails with a CacheError naming the folder.
Chunks hold only pool data already sent to this machine's jobs; readable by
every local user is the same exposure as HTCondor's world-readable execute
directory. Whatever the permissions, `read` checks a chunk's SHA-256 before
handing it out: a chunk damaged on disk (a full disk, a crash before the data
reached it, a hand edit) is removed and reported missing, so it is fetched again.
The one exception is a chunk this same object has just put (checked on its way
in, written whole by this process's account, which no job's user can change):
`read` hands it out without hashing it a second time when it has the size it
was put with; its reader checks the digest of the whole file it belongs to.

Concurrency: chunks are written under a unique name in `tmp/` and renamed into
place (readers see a whole chunk or none). The bytes held and eviction change
under an exclusive `flock` on `.lock`, which is released when the holder dies.
Recency is the chunk's mtime: `read` touches it (an account that may not
write, such as a job's user, reads without touching). A chunk is not written
with fsync: a chunk lost or torn by a crash fails its digest and is fetched
again, so the cost buys nothing. A chunk nobody reads back soon (its file was
written into the sandbox from the same memory) may be written with O_DIRECT,
past the page cache: the disk takes the bytes from the writer's buffer, with no
page allocated, filled and written back for them; a later read fetches it from
the disk as any evicted page would be.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError, FetchworkError

from . import filecopy

log = logging.getLogger(__name__)

DIGEST_RE = re.compile(r"[0-9a-f]{64}\Z")
TMP = "tmp"
LOCK = ".lock"
USAGE = ".usage"
FOLDER_MODE = 0o755
CHUNK_MODE = 0o444
# A chunk being written is kept this long (seconds) before an eviction takes it as
# left by a writer that died.
STALE_TMP_S = 3600.0
MB = 1 << 20
# O_DIRECT's unit: offsets, lengths and memory aligned to it suit every block size
# up to a page.
DIRECT_BLOCK_BYTES = 4096


class CacheError(FetchworkError):
    """The chunk cache could not be used: a bad digest or a folder that cannot be written."""


@dataclass(frozen=True)
class CacheSettings:
    """Where the chunk cache lives and how much it may hold."""

    root: Path
    max_bytes: int


def cache_settings(config: Config) -> CacheSettings:
    """TRANSFER_CACHE_DIR and TRANSFER_CACHE_MAX_MB, checked (ConfigError names the knob)."""
    root = (config.get("TRANSFER_CACHE_DIR") or "").strip()
    if not root:
        raise ConfigError("TRANSFER_CACHE_DIR is empty: set it to a folder for the execute "
                          "machine's chunk cache")
    if not os.path.isabs(root):
        where = config.where("TRANSFER_CACHE_DIR")
        raise ConfigError(f"TRANSFER_CACHE_DIR must be an absolute path, not {root!r}",
                          where.source if where else None, where.line if where else None)
    max_mb = config.get_int("TRANSFER_CACHE_MAX_MB")
    if max_mb < 1:
        where = config.where("TRANSFER_CACHE_MAX_MB")
        raise ConfigError(f"TRANSFER_CACHE_MAX_MB must be at least 1, not {max_mb}",
                          where.source if where else None, where.line if where else None)
    return CacheSettings(Path(root), max_mb * MB)


def check_digest(digest: str) -> str:
    """`digest` if it is a SHA-256 digest in lower-case hex; CacheError otherwise (a
    digest names a file in the cache, so nothing else may pass)."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise CacheError(f"not a SHA-256 digest in lower-case hex: {digest!r}")
    return digest


@dataclass(frozen=True)
class Entry:
    """A cached chunk as eviction sees it."""

    path: Path
    size: int
    used_ns: int


def eviction_order(entries: list[Entry], held_bytes: int, max_bytes: int,
                   keep: Path | None = None) -> list[Entry]:
    """The entries to remove, least recently used first, so that at most `max_bytes`
    stay; `keep` (the chunk just put) is never among them. Pure."""
    doomed: list[Entry] = []
    for entry in sorted(entries, key=lambda e: (e.used_ns, e.path.name)):
        if held_bytes <= max_bytes:
            break
        if entry.path == keep:
            continue
        doomed.append(entry)
        held_bytes -= entry.size
    return doomed


class ChunkCache:
    """An execute machine's on-disk cache of chunks keyed by their SHA-256 digest."""

    def __init__(self, root: Path, max_bytes: int):
        if max_bytes < 1:
            raise CacheError(f"the chunk cache's bound must be at least one byte, not {max_bytes}")
        self.root = Path(root)
        self.max_bytes = max_bytes
        # Chunks this object put or read (checked then), by their size: `read` need
        # not check them again.
        self._checked_in: dict[str, int] = {}
        # Files whose every chunk this object checked and whose whole bytes made their
        # digest (`checked_file`): `copy_file` writes them from their chunks.
        self._checked_files: set[tuple[str, int, tuple[str, ...]]] = set()
        # Whether writes past the page cache may be asked for (`_write_direct`).
        self._direct = True

    @classmethod
    def from_config(cls, config: Config) -> ChunkCache:
        settings = cache_settings(config)
        return cls(settings.root, settings.max_bytes)

    # -- reading -------------------------------------------------------------------------

    def read(self, digest: str) -> bytes | None:
        """The bytes of cached chunk `digest`, read and checked in one pass (a chunk is a
        few MiB; not checked again when this object put it), and touched as just used;
        None when it is not cached, or was damaged (then it is removed, so it is fetched
        again)."""
        path = self._path(check_digest(digest))
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _unreadable(path, exc)
            return None
        return data if self._verified(path, digest, data) else None

    def read_into(self, digest: str, buffer: bytearray) -> memoryview | None:
        """As `read`, into `buffer` (a chunk's size at least) instead of new bytes: the
        part of it the chunk fills, checked; None when not cached or damaged. A chunk
        that does not fit `buffer` is not one of this pool's: damaged."""
        path = self._path(check_digest(digest))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            _unreadable(path, exc)
            return None
        try:
            got = filecopy.read_into(fd, buffer)
            longer = got == len(buffer) and bool(os.read(fd, 1))
        except OSError as exc:
            _unreadable(path, exc)
            return None
        finally:
            os.close(fd)
        if longer:
            log.warning("chunk cache: %s is damaged (longer than a chunk); removing it", path)
            self._discard(path)
            return None
        data = memoryview(buffer)[:got]
        return data if self._verified(path, digest, data) else None

    def _verified(self, path: Path, digest: str, data: bytes | memoryview) -> bool:
        """Whether the bytes read from `path` are chunk `digest`: taken on this object's
        word when it put or checked them (same size), else hashed; touched if so,
        removed if not."""
        if self._checked_in.get(digest) == len(data):  # put or checked by this object
            with contextlib.suppress(OSError):
                os.utime(path)
            return True
        if not self._checked(path, digest, hashlib.sha256(data).hexdigest()):
            return False
        self._checked_in[digest] = len(data)
        return True

    def _checked(self, path: Path, digest: str, actual: str) -> bool:
        """Whether the chunk at `path` is `digest` (its SHA-256 is `actual`): touched if
        so, removed if not."""
        if actual != digest:
            log.warning("chunk cache: %s is damaged (its SHA-256 is %s); removing it", path,
                        actual)
            self._discard(path)
            return False
        with contextlib.suppress(OSError):  # a reader that may not write keeps its order
            os.utime(path)
        return True

    def __contains__(self, digest: str) -> bool:
        """Whether a chunk is cached (not checked, not touched)."""
        return self._path(check_digest(digest)).is_file()

    def held_bytes(self) -> int:
        """The bytes the cache holds by its own count."""
        return self._read_usage()

    # -- writing -------------------------------------------------------------------------

    def put(self, digest: str, data: bytes) -> Path:
        """Keep chunk `data` as `digest` (checked first) and return its path; the least
        recently used chunks are removed past the bound. CacheError when `data` is not
        `digest` or the folder cannot be written."""
        check_digest(digest)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise CacheError(f"chunk {digest} refused: its data has SHA-256 {actual} "
                             f"({len(data)} bytes)")
        return self.put_checked(digest, data)

    def put_checked(self, digest: str, data: bytes | memoryview, direct: bool = False) -> Path:
        """`put` for a chunk its caller has just checked against `digest` (it computed
        the SHA-256 itself, so the bytes are hashed once on their way in). With
        `direct` (`data` in page-aligned memory, and nobody about to read the chunk
        back), its bytes go to the disk past the page cache (`_write_direct`)."""
        path = self._path(check_digest(digest))
        try:
            self._make_folders(path.parent)
            temporary = self._write_temporary(digest, data, direct)
        except OSError as exc:
            raise self._write_error(exc) from exc
        try:
            with self._locked():
                try:
                    replaced = path.stat().st_size
                except FileNotFoundError:
                    replaced = 0
                os.replace(temporary, path)
                held = self._read_usage() + len(data) - replaced
                if held > self.max_bytes:
                    held = self._evict(keep=path)
                self._write_usage(held)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise self._write_error(exc) from exc
        self._checked_in[digest] = len(data)
        return path

    def fill(self, digests: Iterable[str], fetch: Callable[[str], bytes | None],
             ahead: int = 0) -> int:
        """Put each chunk of `digests` not cached yet, fetched by `fetch(digest)` one at a
        time (None: the pool lacks it; the caller reports that when it needs the chunk);
        the bytes fetched. With `ahead` above 0, a helper thread fetches up to that many
        chunks ahead while the one before is checked and written (the fetch and the
        hashing let go of the interpreter's lock, so they overlap); `ahead` + 1 chunks
        are held at most. This is how the execute side's account fills the cache before
        it becomes the job's user, who can then read the chunks but not write the cache.
        A chunk evicted again before it is used (a cache smaller than the input) is
        simply fetched again by its reader."""
        wanted = iter([digest for digest in dict.fromkeys(digests) if digest not in self])
        fetched = 0
        if ahead < 1:
            for digest in wanted:
                data = fetch(digest)
                if data is not None:
                    self.put(digest, data)
                    fetched += len(data)
            return fetched
        with ThreadPoolExecutor(1, thread_name_prefix="cache-fill") as fetcher:
            queued: deque[tuple[str, Future[bytes | None]]] = deque(
                (digest, fetcher.submit(fetch, digest)) for digest in islice(wanted, ahead + 1))
            while queued:
                digest, future = queued.popleft()
                data = future.result()
                if data is not None:
                    self.put(digest, data)
                    fetched += len(data)
                del data  # put: the next fetch may take its place
                following = next(wanted, None)
                if following is not None:
                    queued.append((following, fetcher.submit(fetch, following)))
        return fetched

    # -- whole files ---------------------------------------------------------------------

    def checked_file(self, sha256: str, size: int, chunks: tuple[str, ...]) -> None:
        """Note that the file of `chunks` was checked whole (`size` bytes making
        `sha256`) from chunks this object checked: `copy_file` may write it."""
        self._checked_files.add((sha256, size, chunks))

    def copy_file(self, sha256: str, size: int, chunks: tuple[str, ...], fd: int) -> bool:
        """Write a file noted by `checked_file` to `fd` from its cached chunks, copied in
        the kernel (transfer/filecopy.py); True when written whole. False when the file
        was not noted or a chunk is no longer as it was checked (evicted since, or
        another size): then `fd` is emptied again and the caller writes the file its
        own way, each chunk checked."""
        if (sha256, size, chunks) not in self._checked_files:
            return False
        for digest in chunks:
            expected = self._checked_in.get(digest)
            try:
                source = os.open(self._path(digest), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return self._emptied(fd)
            try:
                whole = (expected is not None and os.fstat(source).st_size == expected
                         and filecopy.copy(source, fd, expected) == expected)
            finally:
                os.close(source)
            if not whole:
                return self._emptied(fd)
        return True

    @staticmethod
    def _emptied(fd: int) -> bool:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return False

    # -- the parts -----------------------------------------------------------------------

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _make_folders(self, fan: Path) -> None:
        for folder in (self.root, self.root / TMP, fan):
            if not folder.is_dir():
                with contextlib.suppress(FileExistsError):
                    folder.mkdir(mode=FOLDER_MODE, parents=True)
                folder.chmod(FOLDER_MODE)  # whatever the umask

    def _write_temporary(self, digest: str, data: bytes | memoryview,
                         direct: bool = False) -> Path:
        temporary = self.root / TMP / f"{digest}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                     CHUNK_MODE)
        try:
            view = memoryview(data)
            if direct and self._direct:
                view = self._write_direct(fd, view)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fchmod(fd, CHUNK_MODE)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        os.close(fd)
        return temporary

    def _write_direct(self, fd: int, view: memoryview) -> memoryview:
        """Write the longest whole-block start of `view` with O_DIRECT: the disk reads
        the bytes from this process's memory, with no page of the page cache
        allocated, filled and written back for them, the most of a chunk write's
        CPU. What is left (the last, partial block) is returned, for a plain write.
        A file system or kernel that refuses O_DIRECT (EINVAL) is not asked again:
        the plain write does it all."""
        whole = len(view) - len(view) % DIRECT_BLOCK_BYTES
        written = 0
        if not whole or not hasattr(os, "O_DIRECT"):
            return view
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
            while written < whole:
                written += os.write(fd, view[written:whole])
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            log.debug("chunk cache: %s refuses O_DIRECT writes; written plainly", self.root)
            self._direct = False
        finally:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        return view[written:]

    def _write_error(self, exc: OSError) -> CacheError:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return CacheError(f"cannot write the chunk cache {self.root} as uid {os.getuid()}: "
                              f"{why} (the cache is written by the account the startd runs "
                              "as; see TRANSFER_CACHE_DIR)")
        return CacheError(f"cannot write the chunk cache {self.root}: {why}")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _read_usage(self) -> int:
        try:
            text = (self.root / USAGE).read_text(encoding="ascii").strip()
            return max(0, int(text))
        except (OSError, ValueError):
            return 0

    def _write_usage(self, held: int) -> None:
        """Under the lock: the count, replaced whole."""
        temporary = self.root / TMP / f"{USAGE}.{os.getpid()}.{secrets.token_hex(4)}"
        temporary.write_text(f"{max(0, held)}\n", encoding="ascii")
        os.replace(temporary, self.root / USAGE)

    def _entries(self) -> list[Entry]:
        entries = []
        for fan in self.root.iterdir():
            if len(fan.name) != 2 or not fan.is_dir():
                continue
            for path in fan.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    stat = path.stat()
                    entries.append(Entry(path, stat.st_size, stat.st_mtime_ns))
        return entries

    def _evict(self, keep: Path | None) -> int:
        """Under the lock: remove the least recently used chunks past the bound; the
        bytes held after (counted from the folder, which also heals a stale count)."""
        self._remove_stale_temporaries()
        entries = self._entries()
        held = sum(entry.size for entry in entries)
        for entry in eviction_order(entries, held, self.max_bytes, keep):
            try:
                entry.path.unlink()
            except FileNotFoundError:
                pass
            log.debug("chunk cache: evicted %s (%d bytes)", entry.path.name, entry.size)
            held -= entry.size
        return held

    def _remove_stale_temporaries(self) -> None:
        """Chunks half written by writers that died (older than STALE_TMP_S)."""
        folder = self.root / TMP
        now_s = time.time()
        for path in folder.iterdir():
            with contextlib.suppress(OSError):
                if now_s - path.stat().st_mtime > STALE_TMP_S:
                    path.unlink()

    def _discard(self, path: Path) -> None:
        """Remove a damaged chunk and count the bytes held again (a damaged chunk may no
        longer have the size it was counted with; this is rare enough to recount)."""
        try:
            with self._locked():
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                self._write_usage(self._evict(keep=None))
        except OSError as exc:
            log.warning("chunk cache: cannot remove the damaged chunk %s: %s", path,
                        exc.strerror or exc)


def _unreadable(path: Path, exc: OSError) -> None:
    """A cached chunk that cannot be read is as good as absent: said, and fetched again."""
    log.warning("chunk cache: cannot read %s (%s); fetching it again", path, exc.strerror or exc)
