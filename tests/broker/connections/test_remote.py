"""Reaching a remote broker: rediss:// with a CA, a client certificate, a user and a
password file, against a real redis-server 7 that requires all of them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.connections.remote import check_url, client_options, redacted
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError
from tests.support.tlsredis import TlsRedis, tls_redis

pytestmark = pytest.mark.timeout(60)

PASSWORD = "s3cret-not-in-any-log"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    with tls_redis(tmp_path_factory.mktemp("tls")) as found:
        with found.admin() as admin:
            admin.acl_setuser("alice", enabled=True, passwords=[f"+{PASSWORD}"],
                              keys=["*"], commands=["+@all"])
        yield found


def settings(server: TlsRedis, tmp_path: Path, **extra: str) -> Config:
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    password_file.chmod(0o600)
    values = {"FETCHWORK_BROKER": server.url, "FETCHWORK_BROKER_CA": str(server.certs.ca),
              "FETCHWORK_BROKER_CERT": str(server.certs.client_cert),
              "FETCHWORK_BROKER_KEY": str(server.certs.client_key),
              "FETCHWORK_BROKER_USERNAME": "alice",
              "FETCHWORK_BROKER_PASSWORD_FILE": str(password_file),
              "FETCHWORK_STATE_DIR": str(tmp_path / "state")}
    values.update(extra)
    return Config.load(environ=values)


def test_tls_user_and_password_file_reach_the_pool(server: TlsRedis, tmp_path: Path,
                                                   pool_name: str) -> None:
    config = settings(server, tmp_path)
    broker = Broker(connect(config, start=False), pool_name, config)
    [job] = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    assert str(broker.get(job)["Cmd"]) == "/bin/true"
    assert broker.client.acl_whoami() in ("alice", b"alice")
    assert broker.client.connection_pool.connection_class.__name__ == "SSLConnection"
    # No embedded server was started for a configured broker.
    assert not (tmp_path / "state" / "redis").exists()


def test_wrong_password_is_refused_without_showing_it(server: TlsRedis, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad"
    bad.write_text("wrong-password\n")
    config = settings(server, tmp_path, FETCHWORK_BROKER_PASSWORD_FILE=str(bad))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RedisUnavailableError) as caught:
        connect(config, start=False)
    assert "wrong-password" not in str(caught.value)
    assert "wrong-password" not in caplog.text and PASSWORD not in caplog.text


def test_a_client_without_the_ca_does_not_trust_the_server(server: TlsRedis,
                                                           tmp_path: Path) -> None:
    config = settings(server, tmp_path, FETCHWORK_BROKER_CA="")
    with pytest.raises(RedisUnavailableError, match="certificate"):
        connect(config, start=False)


def test_a_client_without_a_certificate_is_refused(server: TlsRedis, tmp_path: Path) -> None:
    config = settings(server, tmp_path, FETCHWORK_BROKER_CERT="", FETCHWORK_BROKER_KEY="")
    with pytest.raises(RedisUnavailableError):
        connect(config, start=False)


def test_plain_redis_url_is_refused_by_a_tls_port(server: TlsRedis, tmp_path: Path) -> None:
    url = server.url.replace("rediss://", "redis://")
    config = settings(server, tmp_path, FETCHWORK_BROKER=url, FETCHWORK_BROKER_CA="",
                      FETCHWORK_BROKER_CERT="", FETCHWORK_BROKER_KEY="")
    with pytest.raises(RedisUnavailableError, match="cannot reach the broker"):
        connect(config, start=False)


# -- the options alone (no server) ---------------------------------------------


def test_a_password_in_the_url_is_refused_and_redacted() -> None:
    with pytest.raises(RedisUnavailableError) as caught:
        check_url("rediss://bob:hunter2@broker.example:6380/0")
    assert "hunter2" not in str(caught.value)
    assert "FETCHWORK_BROKER_PASSWORD_FILE" in str(caught.value)
    assert redacted("redis://bob:hunter2@h:1/0") == "redis://bob:***@h:1/0"


def test_tls_files_need_a_rediss_url(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    config = Config.load(environ={"FETCHWORK_BROKER_CA": str(ca)})
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER_CA.*not a rediss://"):
        client_options("redis://h:6379/0", config)


def test_user_from_url_needs_a_password_file() -> None:
    config = Config.load(environ={})
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER_PASSWORD_FILE"):
        client_options("rediss://bob@h:6380/0", config)


def test_missing_password_file_names_the_knob(tmp_path: Path) -> None:
    config = Config.load(environ={"FETCHWORK_BROKER_USERNAME": "bob",
                                  "FETCHWORK_BROKER_PASSWORD_FILE": str(tmp_path / "none")},
                         )
    with pytest.raises(RedisUnavailableError, match="cannot read FETCHWORK_BROKER_PASSWORD_FILE"):
        client_options("rediss://h:6380/0", config)


def test_embedded_default_needs_no_options() -> None:
    assert client_options("unix:///tmp/x.sock", Config.load(environ={})) == {}
