"""Jobs run as their owners: the pure choice of account, and a real root startd.

The choice (`choose_account`) is tested with a made-up user database. The
real test needs the suite to run as root and uses an existing non-root user
of the machine (`daemon`, else `nobody`); no user is created.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchwork.broker.trust.signer import ensure_key_pair
from fetchwork.config.loader import Config, environ_without_config
from fetchwork.errors import StarterError
from fetchwork.starter.runas import Account, choose_account, slot_user_setting
from fetchwork.submit.rootwarning import root_warning
from tests.support.poolprocs import Daemon, RedisProcess, kill_leftovers, pool_config
from tests.support.startd import pool_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

USERS = {"root": Account("root", 0, 0), "alice": Account("alice", 1001, 1001),
         "batch": Account("batch", 900, 900), "nobody": Account("nobody", 65534, 65534)}


def lookup(name: str) -> Account | None:
    return USERS.get(name)


def choose(owner: str | None, allow: bool = True, slot_user: str | None = None):
    return choose_account(owner, allow, slot_user, "SLOT_USER", lookup)


def test_an_owner_who_exists_here_runs_the_job():
    assert choose("alice").account.name == "alice"
    assert choose("alice", slot_user="batch").account.name == "alice"


def test_root_and_unknown_owners_fall_back_to_the_slot_user_then_nobody():
    assert choose("root").account.name == "nobody"
    assert choose("root", slot_user="batch").account.name == "batch"
    assert choose("mallory", slot_user="batch").account.name == "batch"
    assert choose(None).account.name == "nobody"
    assert choose("0").account.name == "nobody"  # a number is not an Owner name


def test_without_runas_owner_the_owner_is_ignored():
    assert choose("alice", allow=False).account.name == "nobody"
    assert choose("alice", allow=False, slot_user="batch").account.name == "batch"


def test_a_root_or_unknown_slot_user_is_refused_with_its_knob():
    with pytest.raises(StarterError, match="SLOT_USER must not be root"):
        choose("root", slot_user="root")
    with pytest.raises(StarterError, match="SLOT_USER 'ghost' is not a user"):
        choose("root", slot_user="ghost")


def test_no_nobody_is_a_clear_error():
    with pytest.raises(StarterError, match="no user 'nobody'"):
        choose_account(None, True, None, "SLOT_USER", lambda name: None)


def test_a_slot_of_its_own_user_wins_over_slot_user():
    config = Config.from_text("SLOT_USER = batch\nSLOT2_USER = alice\n")
    assert slot_user_setting(config, 2) == ("alice", "SLOT2_USER")
    assert slot_user_setting(config, 1) == ("batch", "SLOT_USER")


def test_root_is_told_what_running_as_nobody_means_for_files():
    text = root_warning("root", 0)
    assert text is not None and "nobody" in text and "writable" in text
    assert root_warning("alice", 1001) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="the warning is for root")
def test_submit_as_root_warns(redis_url, pool_name, tmp_path):
    env = environ_without_config()
    env.update(FETCHWORK_BROKER=redis_url, FETCHWORK_POOL=pool_name,
               FETCHWORK_CONFIG=os.devnull, FETCHWORK_STATE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "fetchwork", "submit", "--", "/bin/true"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "you submit as root" in done.stderr and "nobody" in done.stderr


def _existing_user() -> pwd.struct_passwd | None:
    for name in ("daemon", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return entry
    return None


@pytest.fixture(params=["signed", "unsigned"])
def root_pool(request: pytest.FixtureRequest) -> Iterator[tuple[Path, RedisProcess, Daemon]]:
    """A root startd and a broker service; "signed": the pool signs its jobs and the
    startd checks them; "unsigned": no key anywhere."""
    with pool_root("runas") as root:
        work = root / "work"
        work.mkdir()
        work.chmod(0o777)
        server = RedisProcess(root / "redis")
        server.start()
        extra = ""
        if request.param == "signed":
            ensure_key_pair(root / "signing.key", root / "signing.pub")
            extra = (f"JOB_SIGNING_KEY = {root / 'signing.key'}\n"
                     f"JOB_SIGNING_PUBLIC_KEY = {root / 'signing.pub'}\n")
        config = pool_config(root, server.url, "runas", extra)
        startd = Daemon(config, root / "startd.log", "startd")
        broker = Daemon(config, root / "broker.log", "broker")
        broker.start()
        startd.start()
        try:
            yield work, server, startd
        finally:
            startd.stop()
            broker.stop()
            server.stop()
            kill_leftovers(str(work))


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root starter switches users")
@pytest.mark.skipif(_existing_user() is None, reason="no non-root user (daemon, nobody) here")
def test_a_root_startd_runs_each_job_as_its_owner_only_when_signed(root_pool, request):
    """Signed by the pool's broker: the Owner (never root); with no public key on the
    startd: the slot's user (nobody), whatever the Owner."""
    import redis

    from fetchwork.broker.client import Broker

    work, server, startd = root_pool
    signed = request.node.callspec.params["root_pool"] == "signed"
    user = _existing_user()
    assert user is not None

    broker = Broker(redis.Redis(unix_socket_path=server.socket), pool="runas",
                    config=Config.load(environ={}))
    # The leader has published the pool's rules (a signing pool admits every job).
    wait_until(lambda: broker.pool_rules() is not None, 60, fail_if=startd.died,
               what="the pool's rules published by the leader")
    jobs = broker.submit([{"Cmd": "/bin/sh", "Arguments": f"-c 'id -u > uid.{n}'",
                           "Iwd": str(work)} for n in range(2)], owner=user.pw_name)
    rooted = broker.submit([{"Cmd": "/bin/sh", "Arguments": "-c 'id -u > uid.root'",
                             "Iwd": str(work)}], owner="root")
    for job in [*jobs, *rooted]:
        wait_until(lambda job=job: broker.get(job)["JobStatus"] == 4, 60, fail_if=startd.died,
                   what=f"job {job} completed")
    nobody = pwd.getpwnam("nobody").pw_uid
    expected = user.pw_uid if signed else nobody
    assert (work / "uid.0").read_text().strip() == str(expected)
    assert (work / "uid.1").read_text().strip() == str(expected)
    assert (work / "uid.root").read_text().strip() == str(nobody)


def test_a_kept_starter_asks_the_user_database_once_per_refresh(monkeypatch):
    from fetchwork.starter import runas

    asked: list[str] = []

    def database(name: str) -> Account | None:
        asked.append(name)
        return USERS.get(name)

    monkeypatch.setattr(runas, "lookup_account", database)
    monkeypatch.setattr(runas, "_remembered", {})
    remembered = runas.remembered_lookup(3600)
    assert remembered("alice") == USERS["alice"] and remembered("alice") == USERS["alice"]
    assert remembered("nosuchuser") is None and remembered("nosuchuser") is None
    assert asked == ["alice", "nosuchuser"]  # a missing user is remembered too
    every_time = runas.remembered_lookup(0)
    assert every_time("alice") == USERS["alice"] and every_time("alice") == USERS["alice"]
    assert asked == ["alice", "nosuchuser", "alice", "alice"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a starter chooses an account only as root")
def test_a_kept_starter_says_its_jobs_account_at_info_when_it_changes(monkeypatch, caplog):
    import logging

    from fetchwork.starter import runas

    monkeypatch.setattr(runas, "_last_told", [])
    others = [name for name in ("daemon", "bin") if _exists(name)]
    if not others:
        pytest.skip("no second non-root user on this machine")
    caplog.set_level(logging.DEBUG, logger="fetchwork.starter.runas")
    for slot_user in ("nobody", "nobody", others[0], "nobody"):
        monkeypatch.setenv("FETCHWORK_CONFIG", os.devnull)
        monkeypatch.setenv("_FETCHWORK_SLOT_USER", slot_user)
        assert runas.job_user(Config.load(), {"Owner": "root"}, 1) is not None
    told = [(record.levelno, record.getMessage().split()[4]) for record in caplog.records
            if "the job runs as" in record.getMessage()]
    assert told == [(logging.INFO, "nobody"), (logging.DEBUG, "nobody"),
                    (logging.INFO, others[0]), (logging.INFO, "nobody")]


def _exists(name: str) -> bool:
    try:
        return pwd.getpwnam(name).pw_uid != 0
    except KeyError:
        return False
