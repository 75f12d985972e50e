"""Sentinel URLs are read or refused clearly, and a submission's WAIT for replicas.

The URL rules are pure (broker/connections/sentinel.py). The WAIT runs against the
suite's Redis, which has no replica: asking for one times out, returns 0
and warns; asking for none sends no WAIT.
"""

from __future__ import annotations

import logging

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.connections.durability import ReplicaWait
from fetchwork.broker.connections.remote import check_url, client_options
from fetchwork.broker.connections.sentinel import (
    SentinelTarget,
    parse_sentinel_url,
    sentinel_client,
)
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError


def test_one_sentinel_and_a_master_name():
    assert parse_sentinel_url("redis+sentinel://10.0.0.5:26380/main") == SentinelTarget(
        (("10.0.0.5", 26380),), "main", 0, False, None)


def test_several_sentinels_a_db_a_user_and_tls():
    target = parse_sentinel_url("rediss+sentinel://bob@s1:5000,s2,[::1]:5002/fw-1/3")
    assert target == SentinelTarget((("s1", 5000), ("s2", 26379), ("::1", 5002)),
                                    "fw-1", 3, True, "bob")


def test_a_trailing_slash_is_allowed_and_the_user_is_unquoted():
    assert parse_sentinel_url("redis+sentinel://s:1/m/").master == "m"
    assert parse_sentinel_url("redis+sentinel://fw%2Dadmin@s:1/m").username == "fw-admin"


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://s:1", "names no master set"),
    ("redis+sentinel://s:1/", "names no master set"),
    ("redis+sentinel://s:1/m/x", "where a database number"),
    ("redis+sentinel://s:1/m/0/1", "where a database number"),
    ("redis+sentinel://s:1,,s:2/m", "where a sentinel's host:port"),
    ("redis+sentinel://s:port/m", "where a sentinel's host:port"),
    ("redis+sentinel://s:70000/m", "port 70000"),
    ("redis+sentinel://s:1/m?db=2", "query or fragment"),
])
def test_unclear_urls_are_refused_naming_the_knob(url, says):
    with pytest.raises(RedisUnavailableError, match=says) as caught:
        check_url(url)
    assert "FETCHWORK_BROKER" in str(caught.value)
    assert "redis+sentinel://host:port" in str(caught.value)


def test_a_password_in_the_url_is_refused_and_not_repeated():
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER_PASSWORD_FILE") as caught:
        check_url("redis+sentinel://bob:hunter2@s:1/m")
    assert "hunter2" not in str(caught.value)


def test_other_schemes_name_the_sentinel_one_too():
    with pytest.raises(RedisUnavailableError, match=r"redis\+sentinel://"):
        check_url("sentinel://s:1/m")


def test_tls_files_need_the_tls_scheme(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    config = Config.load(environ={"FETCHWORK_BROKER_CA": str(ca)})
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER_CA"):
        client_options("redis+sentinel://s:1/m", config)
    options = client_options("rediss+sentinel://s:1/m", config)
    assert options["ssl_ca_certs"] == str(ca) and options["ssl_cert_reqs"] == "required"


def test_the_url_user_needs_the_password_file(tmp_path):
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER_PASSWORD_FILE"):
        client_options("redis+sentinel://bob@s:1/m", Config.load(environ={}))
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    options = client_options("redis+sentinel://bob@s:1/m",
                             Config.load(environ={"FETCHWORK_BROKER_PASSWORD_FILE": str(secret)}))
    assert (options["username"], options["password"]) == ("bob", "hunter2")


def test_no_replicas_asked_means_no_wait(redis_client, pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    assert ReplicaWait.from_config(Config.load(environ={})) == ReplicaWait(0, 2000)
    assert ReplicaWait(0, 2000).after(redis_client, broker.keys.seq_counter, "x") is None


def test_too_few_replicas_warn_but_the_submission_stands(redis_client, pool_name, caplog):
    config = Config.load(environ={"FETCHWORK_BROKER_WAIT_REPLICAS": "1",
                                  "FETCHWORK_BROKER_WAIT_TIMEOUT": "0.2"})
    broker = Broker(redis_client, pool_name, config)
    with caplog.at_level(logging.WARNING, logger="fetchwork.broker.connections.durability"):
        [job] = broker.submit([{"Cmd": "/bin/true"}], owner="u")
    assert "only 0 of 1 replica(s) acknowledged it within 200 ms" in caplog.text
    assert "FETCHWORK_BROKER_WAIT_REPLICAS" in caplog.text
    assert broker.job_fields([job], ["JobStatus"])[0]["JobStatus"] == 1


def test_credentials_go_to_the_master_and_tls_files_to_the_sentinels_too(tmp_path):
    ca, secret = tmp_path / "ca.pem", tmp_path / "pw"
    ca.write_text("x")
    secret.write_text("hunter2\n")
    url = "rediss+sentinel://bob@s1:5000,s2:5001/fw/2"
    config = Config.load(environ={"FETCHWORK_BROKER_CA": str(ca),
                                  "FETCHWORK_BROKER_PASSWORD_FILE": str(secret)})
    client = sentinel_client(url, client_options(url, config), socket_timeout=7)
    master = client.connection_pool.connection_kwargs
    assert (master["username"], master["password"], master["db"]) == ("bob", "hunter2", 2)
    assert master["ssl_ca_certs"] == str(ca) and client.connection_pool.service_name == "fw"
    sentinels = client.connection_pool.sentinel_manager.sentinels
    assert len(sentinels) == 2
    asked = sentinels[0].connection_pool.connection_kwargs
    assert asked["password"] is None and asked["username"] is None
    assert asked["ssl_ca_certs"] == str(ca) and asked["socket_timeout"] == 7
    assert issubclass(sentinels[0].connection_pool.connection_class, redis.SSLConnection)
    assert issubclass(client.connection_pool.connection_class, redis.SSLConnection)


def test_no_sentinel_answering_is_one_clear_error(tmp_path):
    config = Config.load(environ={"FETCHWORK_BROKER": "redis+sentinel://127.0.0.1:1/fw",
                                  "FETCHWORK_STATE_DIR": str(tmp_path)})
    with pytest.raises(RedisUnavailableError) as caught:
        connect(config, start=False)
    assert str(caught.value) == (
        "cannot reach the broker at redis+sentinel://127.0.0.1:1/fw: no sentinel at "
        "127.0.0.1:1 answered with a master 'fw' that is up (sentinels unreachable, the "
        "master set unknown to them, or a failover under way); check FETCHWORK_BROKER, or "
        "unset it to use the embedded Redis")
