"""People on a real redis-server 7 with TLS and the ACL users `fetchwork acl` prints:
a person's jobs are owned by the person whatever the ad says, a person acts only
on its own jobs (by command or by raw Redis commands with its credentials), the
execute role's raw writes to a queued job, or to a job that waits for admission,
are caught before it runs as its owner, a submit script called by hand with false
flags does not get past the pool's rules, and the leader carries out or refuses
each request without stopping."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import pytest
import redis
from click.testing import CliRunner

from fetchwork.broker.autoclusters import Grouper
from fetchwork.broker.client import Broker
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.store import calls, codec
from fetchwork.broker.store.keys import PoolKeys
from fetchwork.broker.store.scripts import sha
from fetchwork.broker.trust.people import identity_line
from fetchwork.broker.trust.signer import ensure_key_pair
from fetchwork.cli import main
from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import BrokerError
from tests.support.sigbatches import SIG_REF, handed_ad
from tests.support.tlsredis import TlsRedis, tls_redis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

POOL = f"t{uuid.uuid4().hex[:8]}"
PEOPLE = ("alice", "bob", "carol")
SLOT = {"Name": "slot1@exec", "Memory": 2048, "Cpus": 1, "START": True}


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output.strip()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("people")


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[TlsRedis]:
    with tls_redis(folder) as found:
        lines = []
        for name in ("submitter", "execute", "admin"):
            (folder / f"{name}.pw").write_text(f"pw-{name}\n")
            lines.append(cli("acl", name, "--pool", POOL, "--password-file",
                             str(folder / f"{name}.pw")))
        for name in PEOPLE:
            (folder / f"{name}.pw").write_text(f"pw-{name}\n")
            lines.append(cli("acl", "user", name, "--pool", POOL, "--password-file",
                             str(folder / f"{name}.pw")))
        found.write_acl_file(lines)
        with found.admin() as admin:
            assert admin.acl_load()
        yield found


def config_of(server: TlsRedis, folder: Path, user: str, secret: str, **knobs: str) -> Config:
    return Config.load(environ={
        "FETCHWORK_BROKER": server.url, "FETCHWORK_BROKER_CA": str(server.certs.ca),
        "FETCHWORK_BROKER_CERT": str(server.certs.client_cert),
        "FETCHWORK_BROKER_KEY": str(server.certs.client_key),
        "FETCHWORK_BROKER_USERNAME": user,
        "FETCHWORK_BROKER_PASSWORD_FILE": str(folder / f"{secret}.pw"),
        "FETCHWORK_POOL": POOL, "FETCHWORK_STATE_DIR": str(folder / "state"),
        **{f"_FETCHWORK_{k}": v for k, v in knobs.items()}})


@pytest.fixture(scope="module")
def leader(server: TlsRedis, folder: Path) -> Iterator[BrokerService]:
    """The broker service as the admin role, signing, carol a queue super user."""
    ensure_key_pair(folder / "signing.key", folder / "signing.pub")
    config = config_of(server, folder, f"fw-{POOL}-admin", "admin",
                       JOB_SIGNING_KEY=str(folder / "signing.key"),
                       QUEUE_SUPER_USERS="carol", BROKER_LEADER_LEASE="3",
                       MAX_WALLTIME="7200",
                       BROKER_REAPER_INTERVAL="0.5")
    service = BrokerService.from_config(Broker(connect(config, start=False), POOL, config),
                                        config)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    wait_until(lambda: service.is_leader, 20, what="the service leading")
    yield service
    stop.set()
    thread.join(20)


@pytest.fixture(scope="module")
def person(server: TlsRedis, folder: Path, leader: BrokerService) -> Callable[[str], Broker]:
    made: dict[str, Broker] = {}

    def broker_for(name: str, **knobs: str) -> Broker:
        if name not in made or knobs:
            user = f"fw-{POOL}-u-{name}" if name in PEOPLE else f"fw-{POOL}-{name}"
            config = config_of(server, folder, user, name, **knobs)
            made[name] = Broker(connect(config, start=False), POOL, config)
        return made[name]
    return broker_for


def public_key(folder: Path):
    return signedjob.read_public_key((folder / "signing.pub").read_bytes(), "pub")


def as_startd_sees(broker: Broker, job: str):
    ad = handed_ad(broker, job)
    assert ad
    return parse_ad(format_ad(ad))


def admitted(broker: Broker, job: str) -> bool:
    ad = broker.get(job)
    return ad is not None and ad.get("FetchworkState") != "VALIDATING"


# -- owners come from the credentials -------------------------------------------------


def test_a_person_cannot_submit_as_another_owner(person, folder: Path) -> None:
    alice = person("alice")
    jobs = alice.submit([{"Cmd": "/bin/true", "Owner": "bob"},
                         {"Cmd": "/bin/true", "owner": "root", "User": "bob@x"}], owner="bob")
    for job in jobs:
        wait_until(lambda job=job: admitted(alice, job), 20, what=f"{job} admitted")
        ad = alice.get(job)
        assert ad["Owner"] == "alice"
        assert [name for name in ad.keys() if name.lower() == "owner"] == ["Owner"]
        assert signedjob.check(public_key(folder), as_startd_sees(alice, job), POOL) is None


def test_a_persons_cluster_number_comes_from_the_leader(person) -> None:
    alice, bob = person("alice"), person("bob")
    cluster = alice.next_cluster()
    with pytest.raises(BrokerError, match=f"cluster {cluster} was not given to bob"):
        bob.submit([{"Cmd": "/bin/true"}], cluster_id=cluster)
    [job] = alice.submit([{"Cmd": "/bin/true"}], cluster_id=cluster)
    assert job == f"{cluster}.0"


def test_q_and_history_read_everything(person) -> None:
    [mine] = person("bob").submit([{"Cmd": "/bin/sleep", "Arguments": "1"}])
    assert mine in {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in person("alice").query()}


def test_status_says_who_the_connection_acts_as(person) -> None:
    assert identity_line(person("alice").client, POOL).startswith("Authenticated as alice")
    assert "role's credentials" in identity_line(person("submitter").client, POOL)


# -- acting on jobs -----------------------------------------------------------------


def test_a_person_acts_on_its_own_jobs_only(person) -> None:
    alice, bob = person("alice"), person("bob")
    [theirs] = bob.submit([{"Cmd": "/bin/sleep"}])
    [mine] = alice.submit([{"Cmd": "/bin/sleep"}])
    wait_until(lambda: admitted(bob, theirs) and admitted(alice, mine), 20, what="admitted")
    for action in (lambda: alice.remove([theirs]), lambda: alice.hold([theirs]),
                   lambda: alice.requeue([theirs]), lambda: alice.remove([mine, theirs])):
        with pytest.raises(BrokerError, match=f"alice may act only on its own jobs.*{theirs}"):
            action()
    # Nothing was half-done: a refused request naming both left both alone.
    assert {bob.get(theirs)["JobStatus"], alice.get(mine)["JobStatus"]} == {1}
    assert alice.hold([mine]) == [mine]
    assert alice.release([mine]) == [mine]
    assert alice.remove([mine]) == [mine]


def test_a_client_configuration_cannot_make_a_person_a_super_user(person) -> None:
    [theirs] = person("bob").submit([{"Cmd": "/bin/sleep"}])
    sneaky = person("alice", QUEUE_SUPER_USERS="alice")
    with pytest.raises(BrokerError, match="may act only on its own jobs"):
        sneaky.remove([theirs])


def test_a_queue_super_user_acts_on_anyones_jobs(person) -> None:
    [theirs] = person("bob").submit([{"Cmd": "/bin/sleep"}])
    wait_until(lambda: admitted(person("bob"), theirs), 20, what="admitted")
    assert person("carol").hold([theirs], reason="maintenance") == [theirs]
    assert person("bob").get(theirs)["HoldReason"] == "maintenance"
    assert person("carol").remove([theirs]) == [theirs]


def test_an_edit_of_a_signed_attribute_is_signed_again(person, folder: Path) -> None:
    alice = person("alice")
    [job] = alice.submit([{"Cmd": "/bin/sleep", "Arguments": "1"}])
    wait_until(lambda: admitted(alice, job), 20, what="admitted")
    with pytest.raises(BrokerError, match="Owner cannot be changed"):
        alice.edit([job], "Owner", '"bob"')
    assert alice.edit([job], "Arguments", '"5"') == [job]
    assert alice.get(job)["Arguments"] == "5"
    assert signedjob.check(public_key(folder), as_startd_sees(alice, job), POOL) is None
    [theirs] = person("bob").submit([{"Cmd": "/bin/sleep"}])
    with pytest.raises(BrokerError, match="may act only on its own jobs"):
        alice.edit([theirs], "Arguments", '"9"')
    assert person("bob").get(theirs).get("Arguments") is None


# -- raw Redis commands with a person's credentials ---------------------------------------


def test_a_persons_credentials_cannot_touch_the_pool_by_hand(person) -> None:
    alice, bob = person("alice"), person("bob")
    [theirs] = bob.submit([{"Cmd": "/bin/sleep"}])
    keys = PoolKeys(POOL)
    client = alice.client
    attempts = [
        lambda: client.hset(keys.job(theirs), "Cmd", msgpack.packb("/bin/evil")),
        lambda: client.zadd(keys.running, {theirs: 1}),
        lambda: client.zadd(keys.idle, {"999.0": 1}),
        lambda: client.delete(keys.job(theirs)),
        lambda: client.xadd(keys.requests("bob"), {"id": "x", "kind": "remove"}),
        lambda: client.delete(keys.reply("bob", "x")),
        lambda: client.incr(keys.cluster_counter),
        lambda: client.evalsha(sha("remove"), 1, keys.job(theirs), "r", theirs),
        lambda: client.evalsha(sha("submit"), 1, keys.idle, "x"),
        lambda: client.set(keys.leader, "me"),
        lambda: client.execute_command("KEYS", "*"),
    ]
    for attempt in attempts:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert bob.get(theirs)["Cmd"] == "/bin/sleep"


# -- the roles' raw commands outside their work -----------------------------------------


def test_roles_cannot_write_a_persons_namespace_or_move_jobs_by_hand(person) -> None:
    [job] = person("alice").submit([{"Cmd": "/bin/sleep"}])
    keys = PoolKeys(POOL)
    forged = {"id": uuid.uuid4().hex, "kind": "remove",
              "body": msgpack.packb({"jobs": [job]})}
    for role in ("submitter", "execute"):
        client = person(role).client
        for attempt in (lambda c=client: c.xadd(keys.requests("alice"), forged),
                        lambda c=client: c.xadd(keys.reply("alice", "x"), {"a": "b"}),
                        lambda c=client: c.rpush(keys.doorbell, "alice"),
                        lambda c=client: c.incr(keys.person("alice") + "n")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
    submitter = person("submitter").client
    for attempt in (lambda: submitter.zadd(keys.running, {job: 1}),
                    lambda: submitter.zadd(keys.activating, {job: 1}),
                    lambda: submitter.xadd(keys.history, {"a": "b"}),
                    lambda: submitter.incr(keys.leader)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert person("alice").get(job)["JobStatus"] == 1


def test_no_role_can_write_a_signed_batch_but_the_execute_role_reads_it(
        person, folder: Path) -> None:
    """A job's signature is rebuilt at its claim from its batch's stored string: only the
    broker service writes it, and the execute role (which claims) may read it."""
    alice = person("alice")
    [job] = alice.submit([{"Cmd": "/bin/sleep", "Marker": "sigbatch"}])
    wait_until(lambda: admitted(alice, job), 20, what="admitted")
    keys = PoolKeys(POOL)
    execute = person("execute").client
    ref = execute.hget(keys.job(job), SIG_REF)
    assert ref is not None
    number = ref.decode().partition(":")[0]
    batch, runs = keys.sig_batch(number), keys.sig_jobs(number)
    before = execute.get(batch)
    assert before is not None and execute.getrange(batch, 0, 159) == before[:160]
    for role in ("submitter", "execute", "alice"):
        client = person(role).client
        for attempt in (lambda c=client: c.set(batch, b"x" * len(before)),
                        lambda c=client: c.setrange(batch, 160, b"\0" * 32),
                        lambda c=client: c.append(batch, b"x"),
                        lambda c=client: c.delete(batch),
                        lambda c=client: c.pexpire(batch, 1),
                        lambda c=client: c.rename(batch, batch + "x"),
                        lambda c=client: c.set(runs, ""),
                        lambda c=client: c.srem(keys.sig_batches, number),
                        lambda c=client: c.sadd(keys.sig_batches, "999"),
                        lambda c=client: c.incr(keys.sig_counter)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
    assert execute.get(batch) == before
    # The execute role's claim (its own credentials) hands out the signature, which checks.
    slot = {"Name": "slot9@sig", "Cpus": 1, "Memory": 1024, "Requirements": True,
            "Start": {"$expr": 'TARGET.Marker =?= "sigbatch"'}}
    claimed = wait_until(lambda: person("execute").claim(slot), 30,
                         what="the execute role's claim of the job")
    assert f"{claimed['ClusterId']}.{claimed['ProcId']}" == job
    assert signedjob.check(public_key(folder), claimed, POOL) is None


# -- the execute role's raw writes are caught ----------------------------------------------


def test_a_queued_jobs_command_rewritten_by_the_execute_role_does_not_check(
        person, folder: Path) -> None:
    alice = person("alice")
    [job] = alice.submit([{"Cmd": "/bin/true"}])
    wait_until(lambda: admitted(alice, job), 20, what="admitted")
    execute = person("execute")
    keys = PoolKeys(POOL)
    try:
        execute.client.hset(keys.job(job), "Cmd", msgpack.packb("/bin/evil"))
    except redis.exceptions.NoPermissionError:
        return  # refused outright: as good
    why = signedjob.check(public_key(folder), as_startd_sees(alice, job), POOL)
    assert why is not None and "changed after the broker signed them" in why


# -- through the commands -------------------------------------------------------------


def test_fetchwork_submit_by_a_person_owns_the_jobs_to_that_person(
        server: TlsRedis, folder: Path, person, tmp_path: Path, monkeypatch) -> None:
    """No submit file line, attribute or environment makes another owner."""
    password = folder / "alice.pw"
    env = {"FETCHWORK_BROKER": server.url, "FETCHWORK_BROKER_CA": str(server.certs.ca),
           "FETCHWORK_BROKER_CERT": str(server.certs.client_cert),
           "FETCHWORK_BROKER_KEY": str(server.certs.client_key),
           "FETCHWORK_BROKER_USERNAME": f"fw-{POOL}-u-alice",
           "FETCHWORK_BROKER_PASSWORD_FILE": str(password), "FETCHWORK_POOL": POOL,
           "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path / "state"),
           "USER": "bob", "LOGNAME": "bob", "_FETCHWORK_QUEUE_SUPER_USERS": "alice"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "job.sub").write_text('executable = /bin/true\n+Owner = "bob"\n'
                                      '+User = "bob@example.org"\nqueue 2\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["submit", "job.sub"])
    assert result.exit_code == 0, result.output
    cluster = result.output.split("cluster ")[1].split(".")[0]
    jobs = [f"{cluster}.0", f"{cluster}.1"]
    for job in jobs:
        assert person("bob").get(job)["Owner"] == "alice"
    [theirs] = person("bob").submit([{"Cmd": "/bin/sleep"}])
    refused = CliRunner().invoke(main, ["rm", theirs])
    assert refused.exit_code != 0
    assert "alice may act only on its own jobs" in refused.output
    assert CliRunner().invoke(main, ["rm", cluster]).exit_code == 0
    assert person("bob").get(theirs)["JobStatus"] == 1


def decided(broker: Broker, job: str) -> dict | None:
    """The job's ad once the leader's admission settled it (it left the validating set)."""
    if broker.client.zscore(PoolKeys(POOL).validating, job) is not None:
        return None
    ad = broker.get(job)
    return ad if ad is not None and ad.get("FetchworkState") != "VALIDATING" else None


def test_the_execute_roles_write_to_a_waiting_submission_is_refused_not_signed(
        person, monkeypatch) -> None:
    """The submitter role's job waits for admission in a hash the execute role may
    write: the leader refuses it rather than sign the rewritten command."""
    submitter, execute = person("submitter"), person("execute")
    keys = PoolKeys(POOL)
    queue_step = submitter._submitter._queue
    rewritten: list[str] = []

    def rewrite_then_queue(placed, *args, **kwargs):  # between staging and the queue
        for job, _seq in placed:
            execute.client.hset(keys.job(job.job_id), "Cmd", msgpack.packb("/bin/evil"))
            rewritten.append(job.job_id)
            cluster = job.job_id.split(".")[0]
            with pytest.raises(redis.exceptions.NoPermissionError):
                execute.client.hset(keys.staged(cluster), "0", b"x" * 32)
            with pytest.raises(redis.exceptions.NoPermissionError):
                execute.client.delete(keys.staged(cluster))
        return queue_step(placed, *args, **kwargs)

    monkeypatch.setattr(submitter._submitter, "_queue", rewrite_then_queue)
    # A periodic expression keeps the two steps (a job without one is staged and queued
    # by one call), whose gap is where the execute role writes here.
    [job] = submitter.submit([{"Cmd": "/bin/true", "PeriodicRemove": {"$expr": "false"}}],
                             owner="alice")
    assert rewritten == [job]
    ad = wait_until(lambda: decided(submitter, job), 20, what="the admission's verdict")
    assert ad["FetchworkState"] == "FAILED"
    assert "signed attributes changed while it waited" in ad["RemoveReason"]
    assert "FetchworkSignature" not in ad


FALSE_REP = b"Start\n\x80"


def _hand_made(submitter: Broker, attrs: dict) -> str:
    """A job written by hand with the submitter role's credentials (its hash, its staged
    digest) and queued by a submit.lua call that says it is IDLE, in a false
    autocluster, at the head of the queue, under no rule, with a false representative
    for its true autocluster."""
    keys, client = PoolKeys(POOL), submitter.client
    cluster = int(client.incr(keys.cluster_counter))
    job = f"{cluster}.0"
    data = {"ClusterId": cluster, "ProcId": 0, "GlobalJobId": f"{POOL}#{job}#1",
            "Owner": "alice", "Cmd": "/bin/true", "Iwd": "/tmp", "JobPrio": 0,
            "FetchworkState": "IDLE", "JobStatus": 1, "FetchworkAutocluster": "fake",
            "FetchworkOrder": -10**12, **attrs}
    client.hset(keys.job(job), mapping={name: codec.pack(value)
                                        for name, value in data.items()})
    client.hset(keys.staged(cluster), "0", signedjob.staged_digest(data))
    true_gid = Grouper().gid(data)
    pipe = client.pipeline(transaction=True)
    calls.submit(submitter.store, pipe,
                 batch=codec.pack_for_lua([[job, 1, str(-10**12), False, False, "fake"]]),
                 mode="", autoclusters=codec.pack_for_lua(["fake", FALSE_REP,
                                                           true_gid, FALSE_REP]))
    pipe.execute()
    return job


def test_a_submit_call_made_by_hand_does_not_get_past_the_pools_rules(person) -> None:
    submitter = person("submitter")
    # Beyond the pool's MAX_WALLTIME: refused at admission, whatever the call said.
    long = _hand_made(submitter, {"AllowedJobDuration": 9000})
    ad = wait_until(lambda: decided(submitter, long), 20, what="the admission's verdict")
    assert ad["FetchworkState"] == "FAILED"
    assert "MAX_WALLTIME = 7200" in ad["RemoveReason"]
    # Within the rules: admitted, with the leader's autocluster and order, not the call's.
    fine = _hand_made(submitter, {"AllowedJobDuration": 60})
    ad = wait_until(lambda: decided(submitter, fine), 20, what="the admission's verdict")
    assert ad["FetchworkState"] == "IDLE"
    assert ad["FetchworkAutocluster"] != "fake" and ad["FetchworkOrder"] > 0
    rep = submitter.client.hget(PoolKeys(POOL).ac_reps, ad["FetchworkAutocluster"])
    assert rep is not None and rep != FALSE_REP
    submitter.remove([fine])
