"""condor_submit's checks of a submit description: unused lines (typos), one
list of unsupported commands, aliases and the commands added for job policy,
sizes above zero, and a bounded, linear number of attributes per job."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fetchwork.errors import SubmitFileError
from fetchwork.submit.submitcheck import referenced, warnings
from fetchwork.submit.submitfile import parse_submit
from fetchwork.submit.submitmap import SubmitContext, job_ad

pytestmark = pytest.mark.timeout(120)


def parsed(text: str, tmp_path: Path, **kwargs: object):
    return parse_submit(text, 1, submit_dir=str(tmp_path), source="job.sub",
                        **kwargs)  # type: ignore[arg-type]


def test_a_typo_warns_with_file_line_and_text(tmp_path: Path) -> None:
    result = parsed("executable = /bin/true\nexecutabel = /bin/false\nqueue\n", tmp_path)
    assert result.warnings == ["job.sub:2: the line 'executabel = /bin/false' was unused by "
                               "fetchwork submit. Is it a typo?"]


def test_warnings_come_in_line_order_and_unsupported_in_one(tmp_path: Path) -> None:
    text = ("executable = /bin/true\nzzz = 1\ndagman_log = a.log\nnotification = never\n"
            "aaa = 2\nqueue\n")
    assert parsed(text, tmp_path).warnings == [
        "job.sub:2: the line 'zzz = 1' was unused by fetchwork submit. Is it a typo?",
        "job.sub: these commands are not supported by fetchwork and were ignored: "
        "dagman_log (line 3), notification (line 4)",
        "job.sub:5: the line 'aaa = 2' was unused by fetchwork submit. Is it a typo?"]


def test_macros_that_are_used_do_not_warn(tmp_path: Path) -> None:
    text = ("base = /bin\nname = true\nexecutable = $(base)/$(name:x)\nflag = 1\n"
            "if defined flag\n  priority = 3\nendif\n+Project = \"p\"\nqueue\n")
    result = parsed(text, tmp_path)
    assert result.warnings == []
    assert result.ads[0]["Cmd"] == "/bin/true" and result.ads[0]["JobPrio"] == 3


def test_referenced_names() -> None:
    assert referenced("a = $(B) $Fqn(c) $(d:1)\nif defined E\n") == {"b", "c", "d", "e"}


def test_warnings_of_nothing_unknown() -> None:
    assert warnings({"executable": [1]}, ["executable = x"], "executable = x", "f") == []


def test_initial_dir_is_initialdir(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    result = parsed("executable = /bin/true\ninitial_dir = work\nqueue\n", tmp_path)
    assert result.ads[0]["Iwd"] == str(tmp_path / "work") and result.warnings == []
    with pytest.raises(SubmitFileError, match=r"job.sub:2: initial_dir .* is not a directory"):
        parsed("executable = /bin/true\ninitial_dir = nowhere\nqueue\n", tmp_path)


def test_policy_durations_are_read(tmp_path: Path) -> None:
    ad = parsed("executable = /bin/true\nallowed_job_duration = 3600\n"
                "job_max_vacate_time = 30\nqueue\n", tmp_path).ads[0]
    assert (ad["AllowedJobDuration"], ad["JobMaxVacateTime"]) == (3600, 30)
    with pytest.raises(SubmitFileError, match="job.sub:2: allowed_job_duration must be at least 1"):
        parsed("executable = /bin/true\nallowed_job_duration = 0\nqueue\n", tmp_path)


@pytest.mark.parametrize("line", ["request_memory = 0", "request_memory = -5",
                                  "request_disk = -1", "request_disk = 0KB"])
def test_sizes_must_be_above_zero(tmp_path: Path, line: str) -> None:
    with pytest.raises(SubmitFileError, match=r"job.sub:2: request_\w+ must be more than zero"):
        parsed(f"executable = /bin/true\n{line}\nqueue\n", tmp_path)


def test_the_job_counts_its_procs(tmp_path: Path) -> None:
    ads = parsed("executable = /bin/true\nqueue 3\n", tmp_path).ads
    assert {ad["TotalSubmitProcs"] for ad in ads} == {3}


def _attrs(count: int) -> str:
    return "executable = /bin/true\n" + "".join(f"+Attr{n} = {n}\n" for n in range(count)) \
        + "queue\n"


def test_too_many_attributes_are_refused_at_the_line(tmp_path: Path) -> None:
    with pytest.raises(SubmitFileError, match=r"job.sub:12: more than 10 job attributes"):
        parsed(_attrs(50), tmp_path, max_attrs=10)
    started = time.monotonic()
    with pytest.raises(SubmitFileError, match="SUBMIT_MAX_JOB_ATTRS"):
        parsed(_attrs(500_000), tmp_path)
    assert time.monotonic() - started < 30


def test_a_job_ad_takes_many_attributes_in_linear_time(tmp_path: Path) -> None:
    # Each attribute used to scan all the others: 200,000 never finished.
    values = {"executable": "/bin/true", **{f"my.attr{n}": "1" for n in range(200_000)}}
    ctx = SubmitContext(str(tmp_path), "job.sub", {}, [], max_attrs=300_000)
    started = time.monotonic()
    ad = job_ad(values, ctx)
    assert len(ad) > 200_000 and ad["attr199999"] == 1
    assert time.monotonic() - started < 30


def test_a_job_ad_past_the_cap_is_refused() -> None:
    values = {"executable": "/bin/true", **{f"my.attr{n}": "1" for n in range(20)}}
    ctx = SubmitContext("/", "job.sub", {"my.attr7": [17]}, [], queue_line=30, max_attrs=10)
    with pytest.raises(SubmitFileError, match=r"job.sub:17: a job may have at most 10 "):
        job_ad(values, ctx)


def test_eight_thousand_attributes_parse(tmp_path: Path) -> None:
    ad = parsed(_attrs(8000), tmp_path).ads[0]
    assert ad["Attr7999"] == 7999
