"""The roles `fetchwork acl` prints, loaded into a real redis-server 7 (TLS, client
certificates) as its ACL file: each role does its work and nothing else."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.acl import ROLES, role_rules
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.connections.durability import ReplicaWait
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.store.keys import PoolKeys
from fetchwork.cli import main
from fetchwork.config.loader import Config
from fetchwork.config.protocol import EXIT
from tests.support.filterprogs import calls, write_filter
from tests.support.rules import publish_rules
from tests.support.tlsredis import TlsRedis, tls_redis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)

SLOT = {"Name": "slot1@exec", "Memory": 2048, "Cpus": 1, "START": True}
POOL = f"p{uuid.uuid4().hex[:8]}"
OTHER = f"q{uuid.uuid4().hex[:8]}"
FILTERED = f"f{uuid.uuid4().hex[:8]}"   # a pool with an activation filter chain
USER_PREFIX = {POOL: "u", FILTERED: "uf"}


def acl_lines(role: str, pool: str, password_file: Path) -> str:
    result = CliRunner().invoke(main, ["acl", role, "--pool", pool,
                                       "--user", f"{USER_PREFIX[pool]}-{role}",
                                       "--password-file", str(password_file)])
    assert result.exit_code == 0, result.output
    return result.output.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    folder = tmp_path_factory.mktemp("acl")
    with tls_redis(folder) as found:
        lines = []
        for role in ROLES:
            password_file = folder / f"{role}.pw"
            password_file.write_text(f"pw-{role}\n")
            lines += [acl_lines(role, POOL, password_file),
                      acl_lines(role, FILTERED, password_file)]
        found.write_acl_file(lines)
        with found.admin() as admin:
            assert admin.acl_load()
        yield found


def role_config(server: TlsRedis, folder: Path, role: str, pool: str = POOL,
                **more: str) -> Config:
    password_file = folder / f"{role}.pw"
    password_file.write_text(f"pw-{role}\n")
    return Config.load(environ={
        "FETCHWORK_BROKER": server.url, "FETCHWORK_BROKER_CA": str(server.certs.ca),
        "FETCHWORK_BROKER_CERT": str(server.certs.client_cert),
        "FETCHWORK_BROKER_KEY": str(server.certs.client_key),
        "FETCHWORK_BROKER_USERNAME": f"{USER_PREFIX[pool]}-{role}",
        "FETCHWORK_BROKER_PASSWORD_FILE": str(password_file),
        "FETCHWORK_STATE_DIR": str(folder / "state"), **more})


@pytest.fixture(scope="module")
def as_role(server: TlsRedis,
            tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Broker]:
    folder = tmp_path_factory.mktemp("clients")
    made: dict[str, Broker] = {}

    def broker_for(role: str) -> Broker:
        if role not in made:
            config = role_config(server, folder, role)
            made[role] = Broker(connect(config, start=False), POOL, config)
        return made[role]
    # The pool's leader (it runs as admin) has published the pool's rules.
    publish_rules(broker_for("admin").client, POOL)
    return broker_for


def denied(action: Callable[[], object]) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        action()


# -- each role does its work ------------------------------------------------------


def test_a_job_goes_through_its_life_with_each_role_doing_its_part(
        as_role: Callable[[str], Broker]) -> None:
    submitter, execute, admin = (as_role(role) for role in ROLES)
    [job] = submitter.submit([{"Cmd": "/bin/true"}], owner="alice")
    assert [str(ad["Cmd"]) for ad in submitter.query()] == ["/bin/true"]
    ad = execute.claim(SLOT)
    assert ad is not None and f"{ad['ClusterId']}.{ad['ProcId']}" == job
    token = ad["FetchworkClaim"]
    assert execute.renew(job, token, {"RemoteUserCpu": 1.0}) == "ok"
    execute.publish_slot(SLOT, ttl_s=30)
    assert [str(slot["Name"]) for slot in submitter.slots()] == ["slot1@exec"]
    assert execute.finish(job, token, EXIT, {"ExitCode": 0})
    execute.withdraw_slot("slot1@exec")
    assert submitter.slots() == []
    assert [str(done["JobStatus"]) for done in submitter.history()] == ["4"]
    service = BrokerService(admin, reaper_interval_s=1.0, leader_lease_s=5.0)
    assert service.run_once().leader
    service.resign()
    assert admin.trim_history(0) == 1


def test_submitter_holds_releases_and_removes(as_role: Callable[[str], Broker]) -> None:
    submitter = as_role("submitter")
    [job] = submitter.submit([{"Cmd": "/bin/sleep"}], owner="alice")
    assert submitter.hold([job]) == [job]
    assert submitter.release([job]) == [job]
    assert submitter.remove([job]) == [job]


def test_execute_rejects_a_job_back_to_the_queue(as_role: Callable[[str], Broker]) -> None:
    [job] = as_role("submitter").submit([{"Cmd": "/bin/true"}], owner="alice")
    execute = as_role("execute")
    ad = execute.claim(SLOT)
    assert ad is not None
    assert execute.reject(job, ad["FetchworkClaim"])
    as_role("submitter").remove([job])


def test_execute_claims_through_the_activation_filters(server: TlsRedis,
                                                       tmp_path: Path) -> None:
    """With an activation chain the claim waits for the leader's verdict on keys of its
    own (the execute role's selectors); the leader runs as admin."""
    write_filter(tmp_path, "gate", code=0)
    conf = tmp_path / "site.conf"
    conf.write_text(f"ACTIVATION_FILTER_NAMES = GATE\nACTIVATION_FILTER_GATE = {tmp_path}/gate\n"
                    "BROKER_LEADER_LEASE = 3\nBROKER_REAPER_INTERVAL = 0.5\n")
    configs = {role: role_config(server, tmp_path, role, FILTERED, FETCHWORK_CONFIG=str(conf))
               for role in ROLES}
    brokers = {role: Broker(connect(config, start=False), FILTERED, config)
               for role, config in configs.items()}
    service = BrokerService.from_config(brokers["admin"], configs["admin"])
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: service.is_leader, 30, what="the service leading")
        [job] = brokers["submitter"].submit([{"Cmd": "/bin/true"}], owner="alice")
        ad = wait_until(lambda: brokers["execute"].claim(SLOT, wait_s=1), 30,
                        what="a claim through the activation chain")
        assert f"{ad['ClusterId']}.{ad['ProcId']}" == job
        assert calls(tmp_path) and brokers["execute"].finish(job, ad["FetchworkClaim"], EXIT)
    finally:
        stop.set()
        thread.join(30)


# -- and nothing else -----------------------------------------------------------------


def test_execute_cannot_submit_or_change_jobs(as_role: Callable[[str], Broker]) -> None:
    execute = as_role("execute")
    [job] = as_role("submitter").submit([{"Cmd": "/bin/true"}], owner="alice")
    denied(lambda: execute.submit([{"Cmd": "/bin/true"}], owner="mallory"))
    denied(lambda: execute.remove([job]))
    denied(lambda: execute.hold([job]))
    denied(lambda: execute.release([job]))
    denied(lambda: execute.client.set(execute.keys.leader, "mallory"))
    assert [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in execute.query()] == [job]
    as_role("submitter").remove([job])


def test_submitter_cannot_claim_finish_or_publish(as_role: Callable[[str], Broker]) -> None:
    submitter = as_role("submitter")
    [job] = submitter.submit([{"Cmd": "/bin/true"}], owner="alice")
    denied(lambda: submitter.claim(SLOT))
    denied(lambda: submitter.finish(job, "token", EXIT))
    denied(lambda: submitter.publish_slot(SLOT, ttl_s=30))
    denied(lambda: submitter.store.run("reap", [job], [job]))
    submitter.remove([job])


@pytest.mark.parametrize("role", ROLES)
def test_no_role_reads_or_writes_another_pool(role: str, as_role: Callable[[str], Broker],
                                              server: TlsRedis) -> None:
    other = PoolKeys(OTHER)
    with server.admin() as admin:
        admin.zadd(other.queue, {"1.0": 1})
    client = as_role(role).client
    denied(lambda: client.zrange(other.queue, 0, -1))
    denied(lambda: client.zadd(other.idle, {"1.0": 1}))
    denied(lambda: Broker(client, OTHER).query())


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("command", [("FLUSHALL",), ("FLUSHDB",), ("CONFIG", "GET", "*"),
                                     ("KEYS", "*"), ("SCAN", "0"), ("SCRIPT", "FLUSH"),
                                     ("ACL", "LIST"), ("SHUTDOWN",)])
def test_no_role_runs_server_wide_commands(role: str, command: tuple[str, ...],
                                           as_role: Callable[[str], Broker]) -> None:
    denied(lambda: as_role(role).client.execute_command(*command))


def test_rules_keep_pool_name_globs_literal() -> None:
    assert "~fw:{a\\*b}:*" in role_rules("execute", "a*b")


def test_submitter_queues_dependent_jobs_and_requeues(as_role: Callable[[str], Broker]) -> None:
    submitter = as_role("submitter")
    [first] = submitter.submit([{"Cmd": "/bin/true"}], owner="alice")
    [second] = submitter.submit([{"Cmd": "/bin/true", "Depends": first}], owner="alice")
    waiting = submitter.get(second)
    assert waiting is not None and waiting["FetchworkState"] == "BLOCKED"
    assert submitter.requeue([first]) == [], "an idle job is left as it is"
    assert sorted(submitter.remove([first, second])) == sorted([first, second])


def test_submitter_may_wait_for_replicas(as_role: Callable[[str], Broker]) -> None:
    # FETCHWORK_BROKER_WAIT_REPLICAS: the WAIT after a submission is allowed (no replica here).
    submitter = as_role("submitter")
    waited = ReplicaWait(1, 50).after(submitter.client, submitter.keys.seq_counter, "test")
    assert waited == 0
