"""The starter reads the startd's form of its arguments without argparse, and
leaves every other form to argparse, which reads it the same or refuses it."""

from __future__ import annotations

import pytest

from fetchwork.starter.__main__ import _arguments, _plain_arguments, argument_parser

STARTD_FORM = ["--job-ad", "/x/dir_1/.job.ad", "--slot-ad", "/x/dir_1/.machine.ad",
               "--slot", "2", "--sandbox", "/x/dir_1"]


@pytest.mark.parametrize("argv", [STARTD_FORM, [*STARTD_FORM, "--keyword", "FETCHWORK"],
                                  ["--slot", "7", *STARTD_FORM[:4], "--sandbox", "/s"]])
def test_the_startds_form_reads_as_argparse_reads_it(argv: list[str]) -> None:
    plain = _plain_arguments(argv)
    assert plain is not None
    assert plain == argument_parser().parse_args(argv)


@pytest.mark.parametrize("argv", [
    STARTD_FORM[:-2],                              # no --sandbox
    [*STARTD_FORM, "--slot", "3"],                 # a flag twice
    [*STARTD_FORM[:5], "two", *STARTD_FORM[6:]],   # a slot that is no number
    [*STARTD_FORM, "--verbose", "yes"],            # a flag the starter does not know
    ["--job-ad=/a", *STARTD_FORM[2:]],             # argparse's own spelling
    [*STARTD_FORM, "--keyword"],                   # a flag without its value
])
def test_any_other_form_is_left_to_argparse(argv: list[str]) -> None:
    assert _plain_arguments(argv) is None


def test_argparse_still_reads_its_own_spelling_and_refuses_the_rest() -> None:
    assert _arguments(["--job-ad=/a", *STARTD_FORM[2:]]).job_ad == "/a"
    with pytest.raises(SystemExit):
        _arguments(STARTD_FORM[:-2])
