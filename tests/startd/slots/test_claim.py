"""A claim reads its job ad's id, Exclusive and text once per ad."""

from __future__ import annotations

from fetchwork.config.ads import format_ad, from_dict
from fetchwork.startd.settings import SlotHooks
from fetchwork.startd.slots.slot import Claim, Slot


def test_a_claim_reads_its_ad_once_and_again_when_the_ad_is_replaced() -> None:
    claim = Claim(claim_id="c", job_ad=from_dict({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true"}),
                  rank=0.0)
    assert claim.job_id == "3.1" and claim.view().job_id == "3.1"
    assert claim.exclusive is False
    text = claim.job_ad_text()
    assert claim.job_ad_text() is text and text == format_ad(claim.job_ad)
    # The starter's update replaces the ad: what is read follows it.
    claim.job_ad = from_dict({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true",
                              "Exclusive": True, "JobPid": 99})
    assert claim.exclusive is True
    assert "JobPid = 99" in claim.job_ad_text()


def test_a_claim_without_ids_is_labelled_as_before() -> None:
    claim = Claim(claim_id="c", job_ad=from_dict({"Cmd": "/bin/true"}), rank=0.0)
    assert claim.job_id == "(no id)" and claim.view().job_id is None


def test_a_reported_ad_is_made_a_classad_only_when_read() -> None:
    fetched = from_dict({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true"})
    claim = Claim(claim_id="c", job_ad=fetched, rank=0.0)
    claim.report({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true", "ExitCode": 0},
                 exited=True)
    # The id and label come from the ad already made: no new one for them.
    assert claim.job_id == "3.1" and claim.job_ad is fetched and claim.job_exited
    text = claim.job_ad_text()
    assert "ExitCode = 0" in text and claim.job_ad is not fetched
    assert claim.current_ad() is claim.job_ad and claim.job_ad_text() is text


def test_an_unreadable_report_keeps_the_last_ad() -> None:
    fetched = from_dict({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true"})
    claim = Claim(claim_id="c", job_ad=fetched, rank=0.0)
    claim.report({"ClusterId": 3, "Bad": {"$expr": "((("}})
    assert claim.current_ad() is fetched and not claim.job_exited


def test_the_running_job_ad_is_none_once_the_job_exited() -> None:
    slot = Slot(1, "slot1@alpha", SlotHooks("Q", None, None, None))
    fetched = from_dict({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true"})
    slot.claim = Claim(claim_id="c", job_ad=fetched, rank=0.0)
    slot.starter = object()  # type: ignore[assignment]  # any starter: only its presence counts
    assert slot.running_job_ad is fetched
    slot.claim.report({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true", "JobPid": 7})
    assert slot.running_job_ad is not None and slot.running_job_ad["JobPid"] == 7
    slot.claim.report({"ClusterId": 3, "ProcId": 1, "Cmd": "/bin/true", "ExitCode": 0},
                      exited=True)
    assert slot.running_job_ad is None
