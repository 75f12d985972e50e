"""A manifest is named by the SHA-256 of its packed form, so one rewritten in the pool
(raw writes with the execute role's credentials can reach it) is refused when read
back, naming the manifest, instead of handing a job other files."""

from __future__ import annotations

import pytest
import redis

from fetchwork.broker.store import Store, calls
from fetchwork.errors import TransferError
from fetchwork.transfer import stored
from fetchwork.transfer.manifest import FileEntry, Manifest

DIGEST = "d" * 64


def test_a_manifest_changed_in_the_pool_does_not_load(redis_client: redis.Redis,
                                                      pool_name: str) -> None:
    store = Store(redis_client, pool_name, 1000)
    calls.transfer_chunk(store, digest=DIGEST, data=b"x", pending_ms=60_000)
    manifest = Manifest((FileEntry("data", 0o644, 1, DIGEST, (DIGEST,)),))
    ident = stored.attach(store, manifest, 1, 0, lambda _missing: None)
    assert stored.load(store, ident) == manifest
    other = Manifest((FileEntry("data", 0o755, 1, DIGEST, (DIGEST,)),))
    redis_client.hset(store.keys.xfer_manifest(ident), "data", other.pack())
    with pytest.raises(TransferError, match=f"manifest {ident[:12]} .* does not match"):
        stored.load(store, ident)
