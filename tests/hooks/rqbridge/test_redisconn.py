"""RQ_URL in the forms FETCHWORK_BROKER takes, TLS and a Redis user included.

A real redis-server 7 on a TLS port that asks for a client certificate, with
the default user off (tests/support/tlsredis.py); rq enqueues and the bridge
dequeues through the client RQ_URL and its RQ_ knobs make.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq import Queue

from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError
from fetchwork.hooks.rqbridge import redisconn, slotworker
from tests.support.tlsredis import TlsRedis, tls_redis


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    with tls_redis(tmp_path_factory.mktemp("rq-tls")) as found:
        yield found


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    redisconn.forget()
    yield
    redisconn.forget()


def _config(text: str) -> Config:
    return Config.from_text(text, source="rq.conf")


def test_rq_works_over_tls_as_a_redis_user(server: TlsRedis, tmp_path: Path) -> None:
    password = secrets.token_hex(8)
    server.write_acl_file([f"user rqworker on >{password} ~* &* +@all"])
    server.admin().acl_load()
    (tmp_path / "password").write_text(password + "\n")
    certs = server.certs
    connection = redisconn.connect(_config(
        f"RQ_URL = {server.url}\nRQ_CA = {certs.ca}\nRQ_CERT = {certs.client_cert}\n"
        f"RQ_KEY = {certs.client_key}\nRQ_USERNAME = rqworker\n"
        f"RQ_PASSWORD_FILE = {tmp_path / 'password'}\n"))
    assert connection.acl_whoami() in ("rqworker", b"rqworker")
    job = Queue("tls", connection=connection).enqueue("builtins.len", "abc")
    worker = slotworker.new_worker(connection, ["tls"], "slot1@tls.1")
    taken = slotworker.dequeue(worker, None)
    assert taken is not None and taken[0].id == job.id


def test_errors_name_the_rq_knobs(server: TlsRedis) -> None:
    with pytest.raises(RedisUnavailableError, match="RQ_URL=.* carries a password; put the "
                       "password in the file named by RQ_PASSWORD_FILE"):
        redisconn.connect(_config("RQ_URL = redis://user:secret@localhost:1/0\n"))
    with pytest.raises(RedisUnavailableError, match="RQ_CA is set but RQ_URL="):
        redisconn.connect(_config(f"RQ_URL = redis://127.0.0.1:1/0\nRQ_CA = {server.certs.ca}\n"))
    with pytest.raises(RedisUnavailableError) as caught:
        redisconn.connect(_config("RQ_URL = redis://127.0.0.1:1/0\n"))
    assert "check RQ_URL" in str(caught.value)
    assert "FETCHWORK_BROKER" not in str(caught.value)
    with pytest.raises(RedisUnavailableError, match="RQ_URL is empty"):
        redisconn.connect(_config("RQ_URL =\n"))
