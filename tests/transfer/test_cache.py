"""The execute machine's chunk cache: checked puts, LRU eviction, damaged chunks
found and fetched again, real processes racing on one cache, and who may write."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError
from fetchwork.transfer.cache import (
    CacheError,
    ChunkCache,
    Entry,
    cache_settings,
    eviction_order,
)


def chunk(n: int, size: int = 1000) -> tuple[str, bytes]:
    data = (f"chunk {n} ".encode() * size)[:size]
    return hashlib.sha256(data).hexdigest(), data


def age(path: Path, seconds_ago: int) -> None:
    """Make `path` look last used `seconds_ago` (recency is the mtime)."""
    when = path.stat().st_mtime - seconds_ago
    os.utime(path, (when, when))


def test_a_put_chunk_is_found_checked(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    digest, data = chunk(1)
    path = cache.put(digest, data)
    assert path.read_bytes() == data
    assert ChunkCache(tmp_path / "cache", 10_000).read(digest) == data
    assert path == tmp_path / "cache" / digest[:2] / digest
    assert cache.held_bytes() == len(data)


def test_a_chunk_not_cached_is_none(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    assert cache.read(chunk(2)[0]) is None


def test_a_chunk_is_read_checked_in_one_pass(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    digest, data = chunk(6)
    path = cache.put(digest, data)
    old = path.stat().st_mtime - 100
    os.utime(path, (old, old))
    assert cache.read(digest) == data
    assert path.stat().st_mtime > old  # touched as just used


def test_data_that_is_not_its_digest_is_refused_and_nothing_is_kept(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    digest, _ = chunk(3)
    with pytest.raises(CacheError, match="refused"):
        cache.put(digest, b"something else")
    assert cache.read(digest) is None


@pytest.mark.parametrize("digest", ["../../etc/passwd", "ABC", "0" * 63, "G" * 64, "A" * 64])
def test_only_a_lower_case_sha256_names_a_chunk(tmp_path, digest):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    with pytest.raises(CacheError, match="SHA-256"):
        cache.read(digest)
    with pytest.raises(CacheError, match="SHA-256"):
        cache.put(digest, b"")


def test_chunks_are_read_only_and_their_folders_open_to_read(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    path = cache.put(*chunk(4))
    assert path.stat().st_mode & 0o777 == 0o444
    assert path.parent.stat().st_mode & 0o777 == 0o755
    assert cache.root.stat().st_mode & 0o777 == 0o755


def test_putting_a_chunk_again_counts_it_once(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    digest, data = chunk(5)
    cache.put(digest, data)
    cache.put(digest, data)
    assert cache.held_bytes() == len(data)


def test_fill_fetches_only_what_is_missing(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 100_000)
    chunks = dict(chunk(n) for n in range(50, 54))
    digests = list(chunks)
    cache.put(digests[0], chunks[digests[0]])
    asked: list[str] = []

    def fetch(digest: str) -> bytes | None:
        asked.append(digest)
        return None if digest == digests[3] else chunks[digest]

    fetched = cache.fill([*digests, digests[1]], fetch)
    assert asked == digests[1:]  # each missing chunk once, the cached one never
    assert fetched == 2000
    assert all(digest in cache for digest in digests[:3]) and digests[3] not in cache


@pytest.mark.parametrize("ahead", [1, 3])
def test_fill_fetching_ahead_fetches_the_same_and_holds_few(tmp_path, ahead):
    cache = ChunkCache(tmp_path / "cache", 1_000_000)
    chunks = dict(chunk(n) for n in range(60, 70))
    digests = list(chunks)
    cache.put(digests[4], chunks[digests[4]])
    asked: list[str] = []
    put: list[str] = []
    lacking: list[str] = []
    original_put = cache.put

    def fetch(digest: str) -> bytes | None:
        asked.append(digest)
        # never more than `ahead` + 1 chunks fetched and not yet put (one the pool
        # lacks holds nothing once its fetch returned)
        assert len(asked) - len(put) - len(lacking) <= ahead + 1
        if digest == digests[7]:
            lacking.append(digest)
            return None
        return chunks[digest]

    def counted_put(digest: str, data: bytes) -> Path:
        put.append(digest)
        return original_put(digest, data)

    cache.put = counted_put  # type: ignore[method-assign]
    fetched = cache.fill([*digests, digests[0]], fetch, ahead=ahead)
    wanted = [d for d in digests if d != digests[4]]
    assert asked == wanted
    assert put == [d for d in wanted if d != digests[7]]
    assert fetched == 1000 * len(put)
    assert all((d in cache) == (d != digests[7]) for d in digests)


def test_a_fetch_ahead_that_fails_fails_the_fill(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 100_000)
    digests = [chunk(n)[0] for n in range(71, 75)]

    def fetch(digest: str) -> bytes | None:
        raise OSError("the pool went away")

    with pytest.raises(OSError, match="went away"):
        cache.fill(digests, fetch, ahead=2)


def test_a_chunk_this_cache_put_is_read_back_without_hashing_again(tmp_path, monkeypatch):
    cache = ChunkCache(tmp_path / "cache", 100_000)
    digest, data = chunk(76)
    cache.put(digest, data)
    other = ChunkCache(tmp_path / "cache", 100_000)  # another process's view
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes = b"") -> object:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(hashlib, "sha256", counting)
    assert cache.read(digest) == data and hashed == []
    assert other.read(digest) == data and hashed == [len(data)]


def test_fill_refuses_data_that_is_not_its_digest(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 100_000)
    digest, _ = chunk(55)
    with pytest.raises(CacheError, match="refused"):
        cache.fill([digest], lambda _digest: b"wrong")
    assert digest not in cache


# -- eviction -----------------------------------------------------------------------------


def test_eviction_takes_the_least_recently_used_first():
    entries = [Entry(Path(name), 10, used) for name, used in (("a", 3), ("b", 1), ("c", 2))]
    doomed = eviction_order(entries, held_bytes=30, max_bytes=15)
    assert [entry.path.name for entry in doomed] == ["b", "c"]


def test_eviction_never_takes_the_chunk_just_put():
    entries = [Entry(Path("new"), 10, 1), Entry(Path("old"), 10, 2)]
    doomed = eviction_order(entries, held_bytes=20, max_bytes=5, keep=Path("new"))
    assert [entry.path.name for entry in doomed] == ["old"]


def test_nothing_is_evicted_within_the_bound():
    entries = [Entry(Path("a"), 10, 1)]
    assert eviction_order(entries, held_bytes=10, max_bytes=10) == []


def test_a_put_past_the_bound_evicts_in_lru_order(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 3000)
    (a, data_a), (b, data_b), (c, data_c), (d, data_d) = (chunk(n) for n in range(10, 14))
    for seconds_ago, (digest, data) in zip((300, 200, 100), ((a, data_a), (b, data_b),
                                                            (c, data_c)), strict=True):
        age(cache.put(digest, data), seconds_ago)
    assert cache.read(a) is not None  # a is now the most recently used
    cache.put(d, data_d)
    assert b not in cache
    assert {a, c, d} <= {digest for digest in (a, c, d) if digest in cache}
    assert cache.held_bytes() == 3000
    age(cache.root / c[:2] / c, 1000)
    cache.put(b, data_b)
    assert c not in cache and a in cache and d in cache and b in cache


def test_a_chunk_larger_than_the_bound_is_still_kept(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 500)
    small, small_data = chunk(20, 400)
    cache.put(small, small_data)
    big, big_data = chunk(21, 2000)
    path = cache.put(big, big_data)
    assert path.read_bytes() == big_data
    assert small not in cache
    assert cache.held_bytes() == 2000


# -- damage --------------------------------------------------------------------------------


def test_a_damaged_chunk_is_removed_and_fetched_again(tmp_path, caplog):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    digest, data = chunk(30)
    path = cache.put(digest, data)
    path.chmod(0o644)
    with open(path, "r+b") as handle:
        handle.seek(10)
        handle.write(b"X")
    reader = ChunkCache(tmp_path / "cache", 10_000)  # a later transfer's
    assert reader.read(digest) is None
    assert not path.exists()
    assert "damaged" in caplog.text and digest in caplog.text
    assert cache.held_bytes() == 0
    assert cache.put(digest, data) == path
    assert reader.read(digest) == data


def test_a_truncated_chunk_is_damaged_too(tmp_path):
    cache = ChunkCache(tmp_path / "cache", 10_000)
    digest, data = chunk(31)
    path = cache.put(digest, data)
    os.truncate(path, 10)
    assert cache.read(digest) is None
    assert not path.exists()
    assert cache.held_bytes() == 0


# -- processes racing ------------------------------------------------------------------------

RACER = textwrap.dedent("""
    import hashlib, sys
    from pathlib import Path
    from fetchwork.transfer.cache import ChunkCache
    root, bound, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    cache = ChunkCache(Path(root), bound)
    for round_ in range(3):
        for n in range(first, first + count):
            data = (f"chunk {n} ".encode() * 4000)[:4000 + n]
            digest = hashlib.sha256(data).hexdigest()
            found = cache.read(digest)
            if found is not None:
                assert hashlib.sha256(found).hexdigest() == digest
            else:
                path = cache.put(digest, data)
    print("done")
""")


def test_processes_racing_on_one_cache_keep_it_whole_and_bounded(tmp_path):
    root = tmp_path / "cache"
    bound = 60_000  # room for about 15 of the 40 distinct chunks
    # Four processes, overlapping ranges: the same chunks are put and evicted at once.
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(root), str(bound), str(first),
                                "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for first in (0, 5, 10, 20)]
    for racer in racers:
        out, err = racer.communicate(timeout=100)
        assert racer.returncode == 0, err.decode()
        assert out.decode().strip() == "done"
    cache = ChunkCache(root, bound)
    files = [path for path in root.glob("??/*")]
    assert files, "the cache kept nothing"
    for path in files:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
    held = sum(path.stat().st_size for path in files)
    assert cache.held_bytes() == held
    assert held <= bound
    assert not list((root / "tmp").iterdir())


# -- who may write ---------------------------------------------------------------------------

def as_job_user(cache: ChunkCache, digest: str, uid: int, gid: int) -> list[str]:
    """What a process switched to the job's user manages to do to the cache."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            lines = []
            data = cache.read(digest)
            lines.append(f"read {data is not None and data[:5] == b'chunk'}")
            found = cache.root / digest[:2] / digest
            try:
                cache.put(hashlib.sha256(b"forged").hexdigest(), b"forged")
                lines.append("put a chunk")
            except CacheError as exc:
                lines.append(f"put refused: {exc}")
            for attempt in (lambda: open(found, "r+b"), lambda: os.unlink(found),
                            lambda: os.rename(found, f"{found}.x"),
                            lambda: open(found.parent / ("0" * 64), "wb")):
                try:
                    attempt()
                    lines.append("changed the cache")
                except PermissionError:
                    lines.append("refused")
            os.write(write_end, "\n".join(lines).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, text
    return text.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the job's user needs root")
def test_a_jobs_user_reads_chunks_but_cannot_forge_them(job_tmp):
    cache = ChunkCache(job_tmp / "cache", 10_000)
    digest, data = chunk(40)
    cache.put(digest, data)
    nobody = pwd.getpwnam("nobody")
    lines = as_job_user(cache, digest, nobody.pw_uid, nobody.pw_gid)
    assert lines[0] == "read True"
    assert lines[1].startswith("put refused: cannot write the chunk cache")
    assert "as uid" in lines[1] and "TRANSFER_CACHE_DIR" in lines[1]
    assert lines[2:] == ["refused"] * 4
    assert ChunkCache(job_tmp / "cache", 10_000).read(digest) == data


# -- the knobs -------------------------------------------------------------------------------


def test_the_knobs_give_folder_and_bound():
    config = Config.from_text("TRANSFER_CACHE_DIR = /var/cache/fw\nTRANSFER_CACHE_MAX_MB = 2\n")
    settings = cache_settings(config)
    assert settings.root == Path("/var/cache/fw")
    assert settings.max_bytes == 2 * 1024 * 1024
    assert ChunkCache.from_config(config).max_bytes == 2 * 1024 * 1024


def test_the_defaults_put_the_cache_under_the_execute_folder(tmp_path):
    config = Config.load(environ={"FETCHWORK_STATE_DIR": str(tmp_path), "HOME": str(tmp_path)},
                         config_file=os.devnull)
    settings = cache_settings(config)
    assert settings.root == Path(config.require("EXECUTE")) / "chunk-cache"
    assert settings.max_bytes == 4096 * 1024 * 1024


@pytest.mark.parametrize(("text", "message"), [
    ("TRANSFER_CACHE_DIR = relative/place\nTRANSFER_CACHE_MAX_MB = 10\n", "absolute"),
    ("TRANSFER_CACHE_DIR =\nTRANSFER_CACHE_MAX_MB = 10\n", "TRANSFER_CACHE_DIR is empty"),
    ("TRANSFER_CACHE_DIR = /c\nTRANSFER_CACHE_MAX_MB = 0\n", "at least 1"),
    ("TRANSFER_CACHE_DIR = /c\nTRANSFER_CACHE_MAX_MB = lots\n", "TRANSFER_CACHE_MAX_MB"),
])
def test_bad_knobs_are_named(text, message):
    with pytest.raises(ConfigError, match=message):
        cache_settings(Config.from_text(text, "site.conf"))
