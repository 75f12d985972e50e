"""The embedded Redis: a real redis-server, shared, durable, and not fooled by stale files."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from fetchwork.broker.connections.clients import broker_url, connect
from fetchwork.broker.connections.embedded import EmbeddedRedis, find_server
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError


@pytest.fixture
def server(tmp_path):
    embedded = EmbeddedRedis(tmp_path / "state")
    yield embedded
    embedded.stop()


def test_start_serves_on_a_unix_socket(server):
    assert server.start() is True
    assert server.url.startswith("unix://")
    assert server.client().ping()
    assert server.client().config_get("appendonly")["appendonly"] == "yes"
    assert server.client().config_get("appendfsync")["appendfsync"] == "everysec"
    assert server.client().config_get("port")["port"] == "0"


def test_second_start_finds_the_running_instance(server):
    server.start()
    pid = server.server_pid()
    again = EmbeddedRedis(server.folder.parent)
    assert again.start() is False
    assert again.server_pid() == pid


def test_data_survives_a_restart_through_the_aof(server):
    server.start()
    server.client().set("kept", "yes")
    first_pid = server.server_pid()
    assert server.stop() is True
    assert not server.is_running()
    assert server.start() is True
    assert server.server_pid() != first_pid
    assert server.client().get("kept") == b"yes"


def test_stale_pid_and_socket_are_cleaned_not_trusted(server):
    server.folder.mkdir(parents=True)
    # A pid that is certainly not a redis-server: a process that already exited.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server.pid_file.write_text(f"{dead.pid}\n")
    with open(server.socket_path, "w") as stale_socket:
        stale_socket.write("not a socket")
    assert server.start() is True
    assert server.client().ping()
    assert server.server_pid() != dead.pid


def test_two_commands_share_one_instance(tmp_path):
    env = {**os.environ, "FETCHWORK_STATE_DIR": str(tmp_path / "state")}
    env.pop("FETCHWORK_BROKER", None)
    env.pop("FETCHWORK_CONFIG", None)
    script = ("from fetchwork.broker.connections.clients import connect;"
              "c = connect(); print(c.info('server')['process_id']); c.incr('users')")
    try:
        procs = [subprocess.Popen([sys.executable, "-c", script], env=env,
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]
        pids = {proc.communicate(timeout=60)[0].strip() for proc in procs}
        assert all(proc.returncode == 0 for proc in procs)
        assert len(pids) == 1
        server = EmbeddedRedis(tmp_path / "state")
        assert server.client().get("users") == b"3"
    finally:
        EmbeddedRedis(tmp_path / "state").stop()


def test_long_state_paths_get_a_short_socket(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    embedded = EmbeddedRedis(deep)
    try:
        assert len(embedded.socket_path) <= 107
        embedded.start()
        assert embedded.client().ping()
    finally:
        embedded.stop()


def test_broker_url_prefers_the_configured_url(tmp_path):
    config = Config.from_text("FETCHWORK_BROKER = redis://127.0.0.1:1/0\n"
                              f"FETCHWORK_STATE_DIR = {tmp_path}\n")
    assert broker_url(config) == "redis://127.0.0.1:1/0"


def test_a_bad_broker_url_is_refused_with_a_message(tmp_path):
    config = Config.from_text("FETCHWORK_BROKER = http://example/\n")
    with pytest.raises(RedisUnavailableError, match="not a redis://"):
        broker_url(config)


def test_an_unreachable_broker_says_what_to_do(tmp_path):
    config = Config.from_text(f"FETCHWORK_BROKER = unix://{tmp_path}/nothing.sock\n")
    with pytest.raises(RedisUnavailableError, match="cannot reach the broker"):
        connect(config)


def test_a_configured_server_binary_must_be_executable(tmp_path):
    with pytest.raises(RedisUnavailableError, match="not an executable"):
        find_server(str(tmp_path / "missing-redis-server"))


def test_the_session_server_is_real(redis_client):
    assert redis_client.info("server")["redis_version"] >= "6.2"
    assert isinstance(redis_client, redis.Redis)


def test_redis_command_reports_status(tmp_path):
    env = {**os.environ, "FETCHWORK_STATE_DIR": str(tmp_path / "state")}
    env.pop("FETCHWORK_BROKER", None)
    env.pop("FETCHWORK_CONFIG", None)
    run = [sys.executable, "-m", "fetchwork.cli", "redis"]
    try:
        down = subprocess.run([*run, "status"], env=env, capture_output=True, text=True)
        assert down.returncode == 1 and "not running" in down.stdout
        up = subprocess.run([*run, "start"], env=env, capture_output=True, text=True)
        assert up.returncode == 0 and "started" in up.stdout
        status = subprocess.run([*run, "status"], env=env, capture_output=True, text=True)
        assert status.returncode == 0 and "pid" in status.stdout
    finally:
        subprocess.run([*run, "stop"], env=env, capture_output=True)
