"""Filter knobs, DEFAULT_HOLD_DURATION's range, and hold --for/--until (pure)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from fetchwork.broker.filters.gate import summary_of
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.store.holdtime import (
    check_default_hold_s,
    format_hold_until,
    hold_for,
    hold_until,
)
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError, HoldTimeError

NOW = 1_800_000_000.25  # 2027-01-15 08:00:00.25 UTC
UTC = dt.UTC
PLUS2 = dt.timezone(dt.timedelta(hours=2))


def load(tmp_path: Path, text: str) -> Config:
    conf = tmp_path / "site.conf"
    conf.write_text(text)
    return Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                "FETCHWORK_STATE_DIR": str(tmp_path / "state")})


def test_the_defaults_configure_nothing(tmp_path):
    settings = load_settings(load(tmp_path, ""))
    assert not settings.submission_on and not summary_of(settings).any_activation
    assert settings.default_hold_s == 900
    assert settings.activation_interval_s == 15 and settings.activation_timeout_s == 15


def test_chains_args_and_timeouts_are_read(tmp_path):
    settings = load_settings(load(tmp_path, """
SUBMIT_FILTER_NAMES = LICENSE, quota
SUBMIT_FILTER_LICENSE = /opt/site/license_check
SUBMIT_FILTER_LICENSE_ARGS = "--strict 'two words'"
SUBMIT_FILTER_QUOTA = python:site.filters:quota
SUBMIT_FILTER_TIMEOUT = 3
ACTIVATION_FILTER_NAMES = LICENSE
ACTIVATION_FILTER_LICENSE = /opt/site/license_gate
ACTIVATION_FILTER_TIMEOUT = 2
"""))
    assert settings.submit_chain == ("LICENSE", "QUOTA")
    first, second = settings.submission_specs(None)
    assert first.args == ("--strict", "two words") and first.timeout_s == 3
    assert second.in_process and second.value == "python:site.filters:quota"
    [gate] = settings.activation_specs(None)
    assert gate.value == "/opt/site/license_gate" and gate.timeout_s == 2
    assert settings.submission_on and summary_of(settings).any_activation


def test_a_chain_name_without_its_definition_is_refused_naming_the_knob(tmp_path):
    with pytest.raises(ConfigError, match="SUBMIT_FILTER_NAMES names submission filter "
                                          "QUOTA, but SUBMIT_FILTER_QUOTA is not defined"):
        load_settings(load(tmp_path, "SUBMIT_FILTER_NAMES = QUOTA\n"))
    with pytest.raises(ConfigError, match="JOB_TEMPLATE_Short_ACTIVATION_FILTER_NAMES"):
        load_settings(load(tmp_path, "JOB_TEMPLATE_NAMES = Short\n"
                                     "JOB_TEMPLATE_Short_ACTIVATION_FILTER_NAMES = X\n"))


def test_templates_with_activation_chains_are_known(tmp_path):
    settings = load_settings(load(tmp_path, """
ACTIVATION_FILTER_GATE = /x
JOB_TEMPLATE_NAMES = Default, Short
JOB_TEMPLATE_SHORT_ACTIVATION_FILTER_NAMES = GATE
"""))
    assert summary_of(settings).any_activation
    assert settings.activation_templates() == ["short"]
    assert settings.submission_on  # templates apply at submission
    assert settings.longest_activation_chain() == 1


def test_a_bad_template_requirement_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="JOB_TEMPLATE_T_REQUIREMENTS"):
        load_settings(load(tmp_path, "JOB_TEMPLATE_NAMES = T\n"
                                     "JOB_TEMPLATE_T_REQUIREMENTS = RequestCpus <=\n"))


@pytest.mark.parametrize("value", ["59", "604801", "0", "-5"])
def test_default_hold_duration_outside_its_range_is_refused(tmp_path, value):
    with pytest.raises(ConfigError, match=r"site.conf:1: DEFAULT_HOLD_DURATION = .* is "
                                          r"outside 60\.\.604800 seconds"):
        load_settings(load(tmp_path, f"DEFAULT_HOLD_DURATION = {value}\n"))


@pytest.mark.parametrize(("value", "seconds"), [(60, 60), (604800, 604800), (900.0, 900)])
def test_default_hold_duration_bounds_are_accepted(value, seconds):
    assert check_default_hold_s(value) == seconds


def test_hold_for_counts_from_now():
    assert hold_for("90", NOW) == 1_800_000_091
    assert hold_for("2h", NOW) == 1_800_007_201
    for bad in ("0", "soon", "-3"):
        with pytest.raises(HoldTimeError, match="--for"):
            hold_for(bad, NOW)


def test_hold_until_reads_local_time_and_iso_8601():
    assert hold_until("2027-01-15 09:00", NOW, UTC) == 1_800_003_600
    assert hold_until("2027-01-15 11:00", NOW, PLUS2) == 1_800_003_600
    assert hold_until("2027-01-15T09:00:00Z", NOW, PLUS2) == 1_800_003_600
    assert hold_until("2027-01-15T10:00:00+01:00", NOW) == 1_800_003_600
    assert hold_until("2027-01-16", NOW, UTC) == 1_800_057_600


def test_hold_until_without_a_zone_uses_this_machines_local_time():
    local = dt.datetime(2031, 6, 1, 8, 0).astimezone()
    assert hold_until("2031-06-01 08:00", NOW) == int(local.timestamp())


def test_hold_until_refuses_the_past_and_nonsense():
    with pytest.raises(HoldTimeError, match="in the past"):
        hold_until("2027-01-15 07:59", NOW, UTC)
    with pytest.raises(HoldTimeError, match="not a time"):
        hold_until("tomorrow-ish", NOW, UTC)


def test_format_hold_until():
    assert format_hold_until(1_800_003_600, UTC) == "2027-01-15 09:00:00"
