"""The reference hooks' broker client built before a fork: what a forked starter
takes, what it builds again, and that nothing is connected before the fork."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fetchwork.config.loader import get_config, reload_config
from fetchwork.errors import RedisUnavailableError
from fetchwork.hooks import brokerconn, reference
from tests.support.hookenv import hook_environment


@pytest.fixture
def hook_env(redis_url, pool_name, monkeypatch, tmp_path):
    with hook_environment(monkeypatch, {
            "FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path)}) as env:
        yield env


# A zygote's part: build before the fork, then a forked child takes it and
# runs a command; the parent's own client must never have connected.
FORKED = textwrap.dedent("""
    import os, sys
    from fetchwork.hooks import brokerconn, reference
    reference.prepare_fork()
    ahead = brokerconn._ahead
    assert ahead is not None, "nothing built before the fork"
    pid = os.fork()
    if pid == 0:
        try:
            got = brokerconn.broker()
            got.client.set("brokerconn-probe", str(os.getpid()))
            os._exit(0 if got is ahead.broker else 3)
        except BaseException as exc:
            print(repr(exc), file=sys.stderr)
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    pool = ahead.broker.client.connection_pool
    print(os.waitstatus_to_exitcode(status), pid, pool._created_connections)
""")


def test_a_forked_child_takes_the_client_built_before_the_fork_and_connects_it(
        hook_env, redis_client):
    done = subprocess.run([sys.executable, "-c", FORKED], env=hook_env, capture_output=True,
                          text=True, timeout=60, check=True)
    code, child, parent_connections = done.stdout.split()
    assert (code, parent_connections) == ("0", "0"), done.stderr
    assert redis_client.get("brokerconn-probe") == child.encode()


def test_a_process_that_did_not_fork_builds_its_own(hook_env):
    first = brokerconn.broker()
    assert first.client.ping()
    assert brokerconn.broker() is first


def test_the_client_built_ahead_is_not_taken_once_the_configuration_changed(
        hook_env, monkeypatch):
    reload_config()  # this test's own environment (pytest names the phase in it)
    brokerconn.make_before_fork()
    ahead = brokerconn._ahead
    assert ahead is not None and brokerconn._taken(ahead, get_config()) is ahead.broker
    monkeypatch.setenv("_FETCHWORK_FETCHWORK_RENEW_INTERVAL", "7")
    reload_config()
    got = brokerconn.broker()
    assert got is not ahead.broker
    assert got.client.ping()


def test_the_client_built_ahead_is_not_taken_once_the_password_file_changed(
        hook_env, monkeypatch, tmp_path):
    secret = tmp_path / "password"
    secret.write_text("first\n")
    monkeypatch.setenv("_FETCHWORK_FETCHWORK_BROKER_PASSWORD_FILE", str(secret))
    reload_config()
    brokerconn.make_before_fork()
    ahead = brokerconn._ahead
    assert ahead is not None and ahead.key[1]["password"] == "first"
    secret.write_text("second\n")
    # Refused before any connection is tried (this Redis has no password at all).
    assert brokerconn._taken(ahead, get_config()) is None


def test_an_unreachable_broker_is_reported_by_the_first_call_not_the_fork(
        hook_env, monkeypatch, tmp_path):
    monkeypatch.setenv("FETCHWORK_BROKER", f"unix://{tmp_path}/nobody-listens.sock")
    reload_config()
    reference.reset_broker()
    brokerconn.make_before_fork()  # no I/O: builds without complaint
    assert brokerconn._ahead is not None
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER"):
        brokerconn.broker()


def test_nothing_is_built_ahead_for_a_sentinel_url(hook_env, monkeypatch):
    monkeypatch.setenv("FETCHWORK_BROKER", "redis+sentinel://127.0.0.1:1/mymaster")
    reload_config()
    brokerconn.make_before_fork()
    assert brokerconn._ahead is None


def test_a_configuration_with_no_broker_to_name_builds_nothing(hook_env, monkeypatch):
    monkeypatch.setenv("FETCHWORK_BROKER", "ftp://nowhere")
    reload_config()
    brokerconn.make_before_fork()
    assert brokerconn._ahead is None
