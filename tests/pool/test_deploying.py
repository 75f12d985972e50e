"""docs/deploying.md's "Trying it on one machine": a broker host and an execute host
(two state directories) sharing a TLS Redis 7 with the ACL users `fetchwork acl`
prints, both reading deploy/systemd/fetchwork.conf; their Prometheus metrics are
scraped over HTTP while jobs run, and the values move."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fetchwork.broker.connections.acl import ROLES
from fetchwork.config.loader import environ_without_config
from tests.support.ports import reserve_port
from tests.support.tlsredis import TlsRedis, tls_redis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
SITE_CONF = ROOT / "deploy" / "systemd" / "fetchwork.conf"
# A job that keeps a CPU busy for a few seconds.
BURN = "end=$(( $(date +%s) + 4 )); while [ $(date +%s) -lt $end ]; do :; done"


def fw(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "fetchwork", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"fetchwork {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of http://127.0.0.1:<port>/metrics, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return sum(value for (found, found_labels), value in samples.items()
               if found == name and all((k, v) in found_labels for k, v in labels.items()))


@dataclass
class Hosts:
    server: TlsRedis
    pool: str
    folder: Path

    def env(self, host: str, role: str, **knobs: str) -> dict[str, str]:
        """The environment of a fetchwork command on `host` using `role`'s Redis user."""
        password_file = self.folder / f"{role}.pw"
        env = environ_without_config()
        env.update({
            "FETCHWORK_CONFIG": str(SITE_CONF), "FETCHWORK_POOL": self.pool,
            "FETCHWORK_BROKER": self.server.url,
            "FETCHWORK_BROKER_CA": str(self.server.certs.ca),
            "FETCHWORK_BROKER_CERT": str(self.server.certs.client_cert),
            "FETCHWORK_BROKER_KEY": str(self.server.certs.client_key),
            "FETCHWORK_BROKER_USERNAME": f"fw-{self.pool}-{role}",
            "FETCHWORK_BROKER_PASSWORD_FILE": str(password_file),
            "FETCHWORK_STATE_DIR": str(self.folder / host),
            "_FETCHWORK_LOG": str(self.folder / host / "log"),
            "_FETCHWORK_NUM_SLOTS": "2",
            "_FETCHWORK_STARTER_INITIAL_UPDATE_INTERVAL": "1",
            "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "1",
            "_FETCHWORK_BROKER_METRICS_INTERVAL": "0.5",
            "_FETCHWORK_BROKER_REAPER_INTERVAL": "0.5",
        })
        env.update({f"_FETCHWORK_{k}": v for k, v in knobs.items()})
        return env


class Daemon:
    def __init__(self, env: dict[str, str], log: Path, *args: str):
        self.log_path = log
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([sys.executable, "-m", "fetchwork", *args], env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def died(self) -> str | None:
        if self.process.poll() is not None:
            return f"exited {self.process.returncode}: {self.log_path.read_text()}"
        return None

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    folder = Path(tmp_path_factory.mktemp("deploy"))
    if os.geteuid() == 0:
        folder.chmod(0o755)  # jobs run as nobody and need to reach their sandboxes
    pool = f"d{uuid.uuid4().hex[:8]}"
    with tls_redis(folder / "redis") as server:
        lines = []
        for role in ROLES:
            password_file = folder / f"{role}.pw"
            password_file.write_text(uuid.uuid4().hex + "\n")
            password_file.chmod(0o600)
            lines.append(fw(environ_without_config(), "acl", role, "--pool", pool,
                            "--password-file", str(password_file)).strip())
        server.write_acl_file(lines)
        with server.admin() as admin:
            admin.acl_load()
        yield Hosts(server, pool, folder)


def test_broker_and_startd_on_two_hosts_run_jobs_and_serve_metrics(hosts: Hosts) -> None:
    broker_port, startd_port = reserve_port(), reserve_port()
    broker = Daemon(hosts.env("broker-host", "admin", BROKER_METRICS_PORT=str(broker_port)),
                    hosts.folder / "broker.log", "broker")
    startd = Daemon(hosts.env("execute-host", "execute", STARTD_METRICS_PORT=str(startd_port)),
                    hosts.folder / "startd.log", "startd")
    user = hosts.env("submit-host", "submitter")
    try:
        wait_until(lambda: fw(user, "status").count("slot") >= 2, 60,
                   fail_if=lambda: startd.died() or broker.died(), what="two slots published")
        wait_until(lambda: total(scrape(broker_port), "fetchwork_jobs_submitted_total") == 0
                   and "fetchwork_jobs_claimed_total" in str(scrape(broker_port)), 30,
                   fail_if=broker.died, what="the broker's metrics")
        before = scrape(startd_port)
        assert total(before, "fetchwork_slots") == 2
        for _ in range(3):
            fw(user, "submit", "--", "/bin/sh", "-c", BURN)
        # While a job runs, its CPU seconds grow on the startd's page.
        wait_until(lambda: total(scrape(startd_port), "fetchwork_job_cpu_seconds") > 0.5, 60,
                   fail_if=startd.died, what="a running job's CPU on the startd's metrics")
        busy = scrape(startd_port)
        assert total(busy, "fetchwork_slots", state="Claimed") >= 1
        assert total(busy, "fetchwork_job_memory_bytes") > 0
        wait_until(lambda: len(json.loads(fw(user, "history", "--json"))) == 3, 90,
                   fail_if=startd.died, what="three finished jobs")
        after = wait_until(lambda: (lambda s: s if total(
            s, "fetchwork_jobs_finished_total", state="COMPLETED") == 3 else None)(
                scrape(broker_port)), 30, fail_if=broker.died)
        assert total(after, "fetchwork_jobs_submitted_total") == 3
        assert total(after, "fetchwork_jobs_claimed_total") == 3
        assert total(after, "fetchwork_claim_latency_seconds_count") == 3
        assert total(after, "fetchwork_lease_expiries_total") == 0
        wait_until(lambda: total(scrape(broker_port), "fetchwork_jobs") == 0, 30,
                   what="the queue's job gauge back to 0")
        done = scrape(startd_port)
        assert total(done, "fetchwork_hook_runs_total", hook="FETCH_WORK") > \
            total(before, "fetchwork_hook_runs_total", hook="FETCH_WORK")
        assert total(done, "fetchwork_hook_runs_total", hook="FETCH_WORK", exit_code="0") >= 3
        # The reference reply hook declares that it ignores `accept`: no run for a job taken.
        assert total(done, "fetchwork_hook_runs_total", hook="REPLY_FETCH") == 0
        assert total(done, "fetchwork_hook_duration_seconds_count", hook="FETCH_WORK") > 0
        assert total(done, "fetchwork_hook_failures_total") == 0
        assert total(done, "fetchwork_job_cpu_seconds") == 0  # nothing runs any more
    finally:
        assert startd.stop() == 0, startd.log_path.read_text()
        broker.stop()
    # Each host kept its own state directory; the submit host never ran a Redis.
    assert (hosts.folder / "execute-host" / "log" / "StartLog").exists()
    assert not (hosts.folder / "submit-host" / "redis").exists()


def test_a_queued_job_shows_by_state_and_owner(hosts: Hosts) -> None:
    broker_port = reserve_port()
    user = hosts.env("submit-host", "submitter")
    fw(user, "submit", "--hold", "--", "/bin/true")
    broker = Daemon(hosts.env("broker-host", "admin", BROKER_METRICS_PORT=str(broker_port)),
                    hosts.folder / "broker2.log", "broker")
    try:
        samples = wait_until(lambda: (lambda s: s if total(s, "fetchwork_jobs") else None)(
            scrape_or_empty(broker_port)), 30, fail_if=broker.died)
        owners = {dict(labels).get("owner") for (name, labels) in samples
                  if name == "fetchwork_jobs"}
        assert total(samples, "fetchwork_jobs", state="HELD") == 1
        assert owners and "" not in owners
    finally:
        broker.stop()
        fw(user, "rm", "-all")


def scrape_or_empty(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    try:
        return scrape(port)
    except OSError:
        return {}
