"""deploy/: systemd units pass `systemd-analyze verify`, the Kubernetes manifests
validate against the API schemas (kubernetes-validate, offline), the example
configurations use only knobs fetchwork defines, the Containerfile installs every
package, and the Grafana dashboard asks only for metrics fetchwork serves."""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import redis
import yaml

from fetchwork.broker.client import Broker
from fetchwork.broker.metrics import BrokerMetrics
from fetchwork.config.loader import DEFAULTS_FILE, Config, detected_definitions
from fetchwork.startd.metrics import StartdMetrics

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FETCHWORK_BIN = Path(sys.executable).parent / "fetchwork"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / name)
    return parser


def knobs_in(text: str, source: str) -> set[str]:
    return {definition.name.upper() for definition, _ in Config.from_text(text, source).items()}


def defined_knobs() -> set[str]:
    return (knobs_in(Path(DEFAULTS_FILE).read_text(), str(DEFAULTS_FILE))
            | {definition.name.upper() for definition in detected_definitions()})


# -- systemd --------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this installation.
    for path in (DEPLOY / "systemd").glob("*.service"):
        text = path.read_text().replace("/usr/local/bin/fetchwork", str(FETCHWORK_BIN))
        (tmp_path / path.name).write_text(text)
    units = sorted(str(path) for path in tmp_path.glob("*.service"))
    assert len(units) == 3
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_startd_unit_stops_gracefully_and_restarts() -> None:
    service = unit("fetchwork-startd.service")["Service"]
    grace_s = Config.load(environ={}).get_duration_s("STARTD_SHUTDOWN_GRACE")
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    assert float(service["TimeoutStopSec"]) > grace_s
    assert service["Restart"] == "on-failure"
    assert service["User"] == "root"  # to run jobs as SLOT_USER
    assert service["ExecStart"].endswith("fetchwork startd")


def test_broker_unit_runs_unprivileged() -> None:
    service = unit("fetchwork-broker.service")["Service"]
    assert service["User"] not in ("", "root")
    assert service["NoNewPrivileges"] == "yes"
    assert service["Restart"] == "on-failure"


def test_example_configuration_uses_only_defined_knobs() -> None:
    used = knobs_in((DEPLOY / "systemd" / "fetchwork.conf").read_text(), "fetchwork.conf")
    assert used - defined_knobs() == set()
    assert {"FETCHWORK_BROKER_PASSWORD_FILE", "FETCHWORK_BROKER_CA"} <= used


# -- Kubernetes -------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


@pytest.mark.parametrize("doc", manifests(),
                         ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}")
def test_manifest_validates_against_the_api_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(doc for doc in manifests() if doc["kind"] == kind
                and doc["metadata"]["name"] == name)


def test_broker_deployment_has_two_replicas_as_the_admin_user() -> None:
    broker = by_kind("Deployment", "fetchwork-broker")
    assert broker["spec"]["replicas"] == 2
    pod = broker["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    env = {item["name"]: item.get("value") for item in pod["containers"][0]["env"]}
    assert env["FETCHWORK_BROKER_USERNAME"].endswith("-admin")


def test_startd_daemonset_and_secrets_fit_together() -> None:
    startd = by_kind("DaemonSet", "fetchwork-startd")["spec"]["template"]["spec"]
    secret = by_kind("Secret", "fetchwork-redis")["stringData"]
    container = startd["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["FETCHWORK_BROKER_USERNAME"]["value"].endswith("-execute")
    wanted = Path(env["FETCHWORK_BROKER_PASSWORD_FILE"]["value"]).name
    items = [item["key"] for volume in startd["volumes"] if "secret" in volume
             for item in volume["secret"]["items"]]
    assert wanted in items and set(items) <= set(secret)
    assert startd["terminationGracePeriodSeconds"] > 60
    assert env["_FETCHWORK_NUM_SLOTS"]["valueFrom"]["resourceFieldRef"]["resource"] == \
        "limits.cpu"


def test_configmap_configuration_uses_only_defined_knobs() -> None:
    text = by_kind("ConfigMap", "fetchwork-config")["data"]["fetchwork.conf"]
    assert knobs_in(text, "configmap") - defined_knobs() == set()


# -- the image and the dashboard --------------------------------------------------------


def test_containerfile_copies_every_package_folder() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(project["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\w+) /src/", (DEPLOY / "container" / "Containerfile")
                            .read_text(), re.MULTILINE))
    assert folders == copied


def served_metric_names() -> set[str]:
    broker = Broker(redis.Redis(unix_socket_path="/nonexistent"), "p")
    names = set()
    for registry in (BrokerMetrics(broker, 1.0).registry,
                     StartdMetrics(type("Host", (), {"name": "h", "slots": []})()).registry):
        for family in registry.collect():
            names |= {family.name, f"{family.name}_total", f"{family.name}_bucket",
                      f"{family.name}_count", f"{family.name}_sum"}
    return names


def test_dashboard_asks_only_for_served_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "fetchwork-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    asked = {name for expr in exprs for name in re.findall(r"\bfetchwork_\w+", expr)}
    assert asked and asked <= served_metric_names(), asked - served_metric_names()


# -- the glide-in's batch files ------------------------------------------------------------


def test_htcondor_submit_file_runs_fetchwork_glidein() -> None:
    import htcondor2

    text = (DEPLOY / "glidein" / "glidein.sub").read_text()
    submit = htcondor2.Submit(text.split("\nqueue")[0])
    assert submit["arguments"].strip('"').startswith("glidein")
    assert int(submit["request_cpus"]) >= 1
    environment = submit["environment"]
    assert "FETCHWORK_BROKER_PASSWORD_FILE=" in environment
    assert "PASSWORD=" not in environment.replace("PASSWORD_FILE=", "")


def test_slurm_script_is_valid_bash_and_asks_for_resources() -> None:
    script = DEPLOY / "glidein" / "glidein.slurm"
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    directives = [line for line in script.read_text().splitlines()
                  if line.startswith("#SBATCH")]
    assert any("--time" in line for line in directives)
    assert any("--cpus-per-task" in line for line in directives)
