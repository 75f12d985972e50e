"""A claim reads its job ad's id, Exclusive and text once per ad."""

from __future__ import annotations

from fetchwork.config.ads import format_ad, from_dict
from fetchwork.startd.slots.slot import Claim


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
