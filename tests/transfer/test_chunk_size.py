"""The size of a chunk: a file goes up in chunks of just under 2 MiB, and each full
chunk takes its allocator's 2 MiB size class in Redis, not the next one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetchwork.broker.store import Store
from fetchwork.transfer.chunks import CHUNK_BYTES
from tests.support.uploads import uploaded

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024


def test_a_file_goes_up_in_chunks_of_just_under_two_mib(store: Store,
                                                        tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "big", 6 * MIB, 1)
    # Six MiB of data need four chunks: each holds 64 bytes less than 2 MiB.
    assert len(entry.chunks) == 4
    sizes = [store.client.strlen(store.keys.xfer_chunk(digest)) for digest in entry.chunks]
    assert sizes == [CHUNK_BYTES] * 3 + [6 * MIB - 3 * CHUNK_BYTES]
    assert 2 * MIB - 256 <= CHUNK_BYTES < 2 * MIB


def test_a_full_chunk_fits_its_allocators_two_mib_class_in_redis(store: Store,
                                                                 tmp_path: Path) -> None:
    entry = uploaded(store, tmp_path / "full", 2 * CHUNK_BYTES, 2)
    for digest in entry.chunks:
        used = store.client.memory_usage(store.keys.xfer_chunk(digest), samples=0)
        # The value with Redis's header, the key and the entry: within a few hundred
        # bytes of the chunk (a value of exactly 2 MiB would take 2.5 MiB).
        assert used is not None and CHUNK_BYTES <= used <= 2 * MIB + 512
