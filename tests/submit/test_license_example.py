"""The shipped license example: counts licenses in a file, answers 2 when none is
free, gives them back on revert; and the shipped example configuration loads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fetchwork.broker.filters.chain import revert, run_activation_chain
from fetchwork.broker.filters.codes import Activation
from fetchwork.broker.filters.runner import Facts, run_filter
from fetchwork.broker.filters.settings import load_settings
from fetchwork.config.loader import Config
from tests.support.filterprogs import spec, write_filter

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"
GATE = EXAMPLES / "license_gate"
NOW = 2_000_000


def gate(count_file: Path):
    return spec(GATE, kind="activation", args=(str(count_file),), name="LICENSE")


def job(n: int, licenses: int = 1) -> dict:
    return {"ClusterId": n, "ProcId": 0, "RequestLicenses": licenses}


def activate(count_file: Path, ad: dict, more=()) -> Activation:
    result = run_activation_chain([gate(count_file), *more], ad, run_filter, Facts(), NOW, 900)
    revert(result.to_revert, run_filter)
    return result.action


def test_licenses_are_taken_refused_with_2_and_given_back_on_revert(tmp_path):
    count = tmp_path / "licenses"
    count.write_text("2\n")
    assert activate(count, job(1, 2)) is Activation.START
    assert count.read_text().strip() == "0"
    refused = run_filter(gate(count), "activate", job(2))
    assert refused.exit_code == 2 and refused.first_stderr_line() == "1 license(s) wanted, 0 free"
    assert activate(count, job(2)) is Activation.RESERVE
    assert run_filter(gate(count), "revert", job(1, 2)).exit_code == 0
    assert count.read_text().strip() == "2"


def test_a_later_filter_saying_no_gives_the_licenses_back(tmp_path):
    count = tmp_path / "licenses"
    count.write_text("1\n")
    later = spec(write_filter(tmp_path, "later", code=1), kind="activation")
    assert activate(count, job(1), more=[later]) is Activation.BLOCK
    assert count.read_text().strip() == "1"


def test_concurrent_activations_never_hand_out_a_license_twice(tmp_path):
    count = tmp_path / "licenses"
    count.write_text("3\n")
    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(lambda n: run_filter(gate(count), "activate", job(n)).exit_code,
                              range(6)))
    assert sorted(codes) == [0, 0, 0, 2, 2, 2]
    assert count.read_text().strip() == "0"


def test_the_example_configuration_loads(tmp_path):
    text = (EXAMPLES / "filters.conf").read_text()
    conf = tmp_path / "site.conf"
    conf.write_text(text)
    settings = load_settings(Config.load(environ={
        "FETCHWORK_CONFIG": str(conf), "FETCHWORK_STATE_DIR": str(tmp_path)}))
    assert settings.activation_chain == ("LICENSE",)
    assert settings.activation["LICENSE"].args == ("/var/lib/fetchwork/licenses",)
    assert [s.name for s in settings.submission_specs(settings.templates["short"])] == [
        "QUOTA", "AUDIT"]
    assert settings.submission["QUOTA"].args == ("--limit", "100")


def test_the_documented_example_configuration_loads(tmp_path):
    page = (EXAMPLES.parent.parent / "docs" / "scheduling.md").read_text()
    section = page.split("## Filters and templates", 1)[1]
    block = section.split("```\n", 2)[1]
    conf = tmp_path / "documented.conf"
    conf.write_text(block)
    settings = load_settings(Config.load(environ={
        "FETCHWORK_CONFIG": str(conf), "FETCHWORK_STATE_DIR": str(tmp_path)}))
    assert settings.submit_chain == ("AUDIT",) and settings.activation_chain == ("LICENSE",)
    assert settings.templates["short"].reason == "Short jobs use at most 4 CPUs"
