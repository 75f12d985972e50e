"""File transfer with the role users `fetchwork acl` prints, on a real redis-server 7
(TLS, client certificates): the submitter sends and settles, the execute role
returns outputs and replaces a checkpoint, each through its scripts; raw writes
outside them are refused where Redis can refuse them."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.acl import ROLES
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.store import calls
from fetchwork.cli import main
from fetchwork.config.loader import Config
from fetchwork.transfer import stored
from fetchwork.transfer.manifest import FileEntry, Manifest
from tests.support.tlsredis import TlsRedis, tls_redis

pytestmark = pytest.mark.timeout(90)

POOL = f"r{uuid.uuid4().hex[:8]}"
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def as_role(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Broker]]:
    folder = Path(tmp_path_factory.mktemp("xferroles"))
    with tls_redis(folder / "redis") as server:
        lines = []
        for role in ROLES:
            (folder / f"{role}.pw").write_text(f"pw-{role}\n")
            result = CliRunner().invoke(main, ["acl", role, "--pool", POOL,
                                               "--password-file", str(folder / f"{role}.pw")])
            assert result.exit_code == 0, result.output
            lines.append(result.output.strip())
        server.write_acl_file(lines)
        with server.admin() as admin:
            assert admin.acl_load()
        yield lambda role: _broker(server, folder, role)


def _broker(server: TlsRedis, folder: Path, role: str) -> Broker:
    config = Config.load(environ={
        "FETCHWORK_BROKER": server.url, "FETCHWORK_BROKER_CA": str(server.certs.ca),
        "FETCHWORK_BROKER_CERT": str(server.certs.client_cert),
        "FETCHWORK_BROKER_KEY": str(server.certs.client_key),
        "FETCHWORK_BROKER_USERNAME": f"fw-{POOL}-{role}",
        "FETCHWORK_BROKER_PASSWORD_FILE": str(folder / f"{role}.pw"),
        "FETCHWORK_STATE_DIR": str(folder / "state")})
    return Broker(connect(config, start=False), POOL, config)


def _sandbox(broker: Broker, text: bytes, name: str) -> Manifest:
    digest = hashlib.sha256(text).hexdigest()
    calls.transfer_chunk(broker.store, digest=digest, data=text, pending_ms=HOUR_MS)
    return Manifest((FileEntry(name, 0o644, len(text), digest, (digest,)),))


def test_each_role_does_its_part_of_a_transfer(as_role: Callable[[str], Broker]) -> None:
    submitter, execute = as_role("submitter"), as_role("execute")
    store = submitter.store
    inputs = _sandbox(submitter, b"input\n", "in.txt")
    in_id = stored.attach(store, inputs, 1, 0, lambda _missing: None)
    # The execute side returns outputs (a new manifest, waiting) ...
    outputs = _sandbox(execute, b"output\n", "out.txt")
    out_id = stored.attach(execute.store, outputs, 1, 0, lambda _missing: None,
                           output_of="1.0", expires_s=2_000_000_000)
    assert stored.waiting_outputs(store) == {"1.0": (out_id, 2_000_000_000.0)}
    # ... and replaces an evicted job's checkpoint: the old one is released.
    checkpoint = _sandbox(execute, b"state\n", "ckpt")
    ck_id = stored.attach(execute.store, checkpoint, 1, 0, lambda _missing: None)
    stored.detach(execute.store, ck_id, 1)
    assert not store.client.exists(store.keys.xfer_manifest(ck_id))
    # The submitter fetched the outputs: settled, freed.
    assert stored.settle(store, out_id, "1.0", "delivered")
    assert not store.client.exists(store.keys.xfer_manifest(out_id))
    stored.detach(store, in_id, 1)
    assert int(store.client.get(store.keys.xfer_bytes) or 0) == 0


def test_raw_transfer_writes_outside_the_roles_work_are_refused(
        as_role: Callable[[str], Broker]) -> None:
    submitter, execute = as_role("submitter").client, as_role("execute").client
    keys = as_role("execute").keys
    attempts = [
        # Only a run's outputs wait to be fetched: the submitter cannot add some.
        lambda: submitter.zadd(keys.xfer_outputs, {"9.0|x": 1}),
        # The execute role's hash writes on transfer keys are the manifests' only.
        lambda: execute.hset(keys.xfer_refs, "x", 1),
        lambda: execute.hset(keys.xfer_chunkrefs, "x", 1),
        lambda: execute.zadd(keys.xfer_refs, {"x": 1}),
    ]
    for role in (submitter, execute):
        attempts += [lambda c=role: c.lpush(keys.xfer_refs, "x"),
                     lambda c=role: c.rename(keys.xfer_bytes, keys.xfer_outputs),
                     lambda c=role: c.execute_command("COPY", keys.xfer_bytes, keys.job("9.0"))]
    for attempt in attempts:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
