"""Chains with real filter programs: order, each filter seeing what the one before
left, reverts in reverse order with the ad each was given, templates first."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetchwork.broker.filters.admission import activate, admit
from fetchwork.broker.filters.chain import revert, run_activation_chain, run_submission_chain
from fetchwork.broker.filters.codes import Activation
from fetchwork.broker.filters.runner import Facts, run_filter
from fetchwork.broker.filters.settings import load_settings
from fetchwork.config.loader import Config
from tests.support.filterprogs import calls, spec, write_filter

pytestmark = pytest.mark.timeout(60)

AD = {"ClusterId": 1, "ProcId": 0, "Owner": "alice", "Tag": "t0", "RequestCpus": 2}
NOW = 2_000_000


def retag(tag: str) -> str:
    """Shell: rewrite the Tag attribute of the ad file."""
    return f"sed -i 's/^Tag = .*/Tag = \"{tag}\"/' \"$file\""


def load(tmp_path: Path, text: str) -> Config:
    conf = tmp_path / "site.conf"
    conf.write_text(text)
    return Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                "FETCHWORK_STATE_DIR": str(tmp_path / "state")})


def test_a_submission_chain_runs_in_order_each_seeing_the_last_rewrite(tmp_path):
    a = write_filter(tmp_path, "a", code=1, body=retag("t1"))
    b = write_filter(tmp_path, "b", code=0)
    c = write_filter(tmp_path, "c", code=1, body=retag("t2"))
    result = run_submission_chain([spec(a), spec(b), spec(c)], AD, run_filter)
    assert result.ok and result.ad["Tag"] == "t2"
    assert calls(tmp_path) == ['a submit "t0"', 'b submit "t1"', 'c submit "t1"']


def test_a_failing_submission_chain_reverts_what_ran_in_reverse_with_its_ad(tmp_path):
    a = write_filter(tmp_path, "a", code=1, body=retag("t1"))
    b = write_filter(tmp_path, "b", code=1, body=retag("t2"))
    c = write_filter(tmp_path, "c", code='$( [ "$action" = revert ] && echo 0 || echo 3 )',
                     body="echo 'over quota' >&2")
    d = write_filter(tmp_path, "d", code=0)
    result = run_submission_chain([spec(a), spec(b), spec(c), spec(d)], AD, run_filter)
    assert not result.ok
    assert result.reason == "submission filter C failed the job: exit 3: over quota"
    revert(result.ran, run_filter)
    assert calls(tmp_path) == ['a submit "t0"', 'b submit "t1"', 'c submit "t2"',
                               'c revert "t2"', 'b revert "t1"', 'a revert "t0"']


def test_a_missing_program_fails_the_chain_and_is_not_reverted(tmp_path):
    a = write_filter(tmp_path, "a")
    result = run_submission_chain([spec(a), spec(tmp_path / "gone", name="GONE")], AD,
                                  run_filter)
    assert result.reason == f"submission filter GONE not found: {tmp_path / 'gone'}"
    revert(result.ran, run_filter)
    assert calls(tmp_path) == ['a submit "t0"', 'a revert "t0"']


def test_a_sleeping_submission_filter_times_out(tmp_path):
    slow = write_filter(tmp_path, "slow", body="sleep 30")
    result = run_submission_chain([spec(slow, timeout_s=1)], AD, run_filter)
    assert result.reason == "submission filter SLOW timed out after 1 s"


@pytest.mark.parametrize(("code", "action"), [(1, Activation.BLOCK), (2, Activation.RESERVE),
                                              (3, Activation.HOLD), (4, Activation.FAIL),
                                              (7, Activation.RESERVE)])
def test_an_activation_chain_stops_at_a_nonzero_code_and_reverts_what_passed(
        tmp_path, code, action):
    a = write_filter(tmp_path, "a")
    b = write_filter(tmp_path, "b")
    c = write_filter(tmp_path, "c", code=f'$( [ "$action" = revert ] && echo 0 || echo {code} )')
    d = write_filter(tmp_path, "d")
    specs = [spec(p, kind="activation") for p in (a, b, c, d)]
    facts = Facts(scheduler_pass=1, resource_count=2)
    result = run_activation_chain(specs, AD, run_filter, facts, NOW, 900)
    assert result.action is action and result.decided_by == "C"
    revert(result.to_revert, run_filter, facts)
    assert calls(tmp_path) == ['a activate "t0"', 'b activate "t0"', 'c activate "t0"',
                               'b revert "t0"', 'a revert "t0"']


def test_an_activation_chain_that_passes_starts_and_reverts_nothing(tmp_path):
    specs = [spec(write_filter(tmp_path, n), kind="activation") for n in ("a", "b")]
    result = run_activation_chain(specs, AD, run_filter, Facts(), NOW, 900)
    assert result.action is Activation.START and result.to_revert == []


def test_activation_timeout_and_missing_program_reserve(tmp_path):
    slow = spec(write_filter(tmp_path, "slow", body="sleep 30"), kind="activation",
                timeout_s=1)
    assert run_activation_chain([slow], AD, run_filter, Facts(), NOW, 900).action is \
        Activation.RESERVE
    gone = spec(tmp_path / "gone", kind="activation")
    assert run_activation_chain([gone], AD, run_filter, Facts(), NOW, 900).action is \
        Activation.RESERVE


def test_a_filter_that_holds_with_its_own_holduntil(tmp_path):
    hold = write_filter(tmp_path, "hold", code=3, body=f'echo "HoldUntil = {NOW + 77}" >> "$file"')
    result = run_activation_chain([spec(hold, kind="activation")], AD, run_filter, Facts(),
                                  NOW, 900)
    assert result.action is Activation.HOLD and result.verdict.hold_until == NOW + 77
    plain = write_filter(tmp_path, "plain", code=3)
    result = run_activation_chain([spec(plain, kind="activation")], AD, run_filter, Facts(),
                                  NOW, 900)
    assert result.verdict.hold_until == NOW + 900


# -- templates and cluster-wide chains together ------------------------------------

def site(tmp_path: Path) -> Config:
    for name in ("quota", "audit", "license", "gate"):
        write_filter(tmp_path, name, code=0)
    return load(tmp_path, f"""
SUBMIT_FILTER_NAMES = AUDIT
SUBMIT_FILTER_AUDIT = {tmp_path}/audit
SUBMIT_FILTER_QUOTA = {tmp_path}/quota
ACTIVATION_FILTER_NAMES = LICENSE
ACTIVATION_FILTER_LICENSE = {tmp_path}/license
ACTIVATION_FILTER_GATE = {tmp_path}/gate
JOB_TEMPLATE_NAMES = Default, Short
JOB_TEMPLATE_SHORT_DEFAULT_JobPrio = 5
JOB_TEMPLATE_SHORT_DEFAULT_Deadline = QDate + 3600
JOB_TEMPLATE_SHORT_REQUIREMENTS = RequestCpus <= 4
JOB_TEMPLATE_SHORT_REQUIREMENTS_REASON = "Short jobs use at most 4 CPUs"
JOB_TEMPLATE_SHORT_SUBMIT_FILTER_NAMES = QUOTA
JOB_TEMPLATE_SHORT_ACTIVATION_FILTER_NAMES = GATE
""")


def test_the_template_chain_runs_before_the_cluster_wide_one(tmp_path):
    settings = load_settings(site(tmp_path))
    admitted = admit({**AD, "JobTemplate": "short"}, settings, run_filter)
    assert admitted.ok
    assert admitted.ad["JobPrio"] == 5 and admitted.ad["Deadline"] == {"$expr": "QDate + 3600"}
    activate(admitted.ad, settings, run_filter, Facts(), NOW)
    assert calls(tmp_path) == ['quota submit "t0"', 'audit submit "t0"',
                               'gate activate "t0"', 'license activate "t0"']


def test_template_defaults_do_not_override_what_the_job_set(tmp_path):
    settings = load_settings(site(tmp_path))
    admitted = admit({**AD, "JobTemplate": "Short", "jobprio": 1}, settings, run_filter)
    assert admitted.ad["jobprio"] == 1 and "JobPrio" not in admitted.ad


def test_template_requirements_fail_the_job_with_their_reason_and_revert(tmp_path):
    settings = load_settings(site(tmp_path))
    admitted = admit({**AD, "JobTemplate": "Short", "RequestCpus": 8}, settings, run_filter)
    assert not admitted.ok
    assert admitted.reason == "job template Short refused the job: Short jobs use at most 4 CPUs"
    assert calls(tmp_path) == ['quota submit "t0"', 'audit submit "t0"',
                               'audit revert "t0"', 'quota revert "t0"']


def test_a_job_without_a_template_uses_default(tmp_path):
    settings = load_settings(site(tmp_path))
    admitted = admit(AD, settings, run_filter)
    assert admitted.ok and admitted.ad["JobTemplate"] == "Default"
    assert calls(tmp_path) == ['audit submit "t0"']


def test_an_unknown_template_fails_the_job_naming_it(tmp_path):
    settings = load_settings(site(tmp_path))
    admitted = admit({**AD, "JobTemplate": "Huge"}, settings, run_filter)
    assert not admitted.ok
    assert admitted.reason == "unknown job template 'Huge' (JOB_TEMPLATE_NAMES: Default, Short)"


def test_a_filter_may_change_the_template_that_then_applies(tmp_path):
    config = site(tmp_path)
    write_filter(tmp_path, "audit", code=1,
                 body="echo 'JobTemplate = \"Short\"' >> \"$file\"")
    admitted = admit(AD, load_settings(config), run_filter)
    assert admitted.ok and admitted.ad["JobPrio"] == 5 and admitted.ad["JobTemplate"] == "Short"


def test_the_template_name_takes_its_canonical_spelling(tmp_path):
    settings = load_settings(site(tmp_path))
    admitted = admit({**AD, "jobtemplate": "short"}, settings, run_filter)
    assert admitted.ok and admitted.ad["JobTemplate"] == "short"
    assert "jobtemplate" not in admitted.ad
