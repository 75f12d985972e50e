"""condor_q's views as pure functions: plain tables cut to a width, the batch
view, -af and -format, -better-analyze's clauses, single-dash options."""

from __future__ import annotations

import json

import classad2
import click
import pytest

from fetchwork.config.ads import from_dict
from fetchwork.config.matching import requirement_clauses
from fetchwork.errors import FetchworkError
from fetchwork.submit import analyze, formats, tables, texttable
from fetchwork.submit.options import condor_args

NOW = 1_700_000_000.0
LONG_ARGS = "--input /data/run-0001/input.dat --steps 100000 --output /data/run-0001/output.dat"


def job(cluster: int, proc: int, status: int = 1, **attrs: object) -> dict[str, object]:
    return {"ClusterId": cluster, "ProcId": proc, "Owner": "ann", "QDate": NOW - 60,
            "JobStatus": status, "Cmd": "/bin/sleep", "Arguments": "10", **attrs}


# -- plain tables ------------------------------------------------------------------

@pytest.mark.parametrize("width", [80, 60, 40])
def test_a_narrow_terminal_cuts_only_the_command(width: int) -> None:
    ads = [job(123456, 7, 2, JobStartDate=NOW - 5, JobPrio=10, ImageSize=204800,
               Owner="someone_long", Cmd="/opt/bin/simulate", Arguments=LONG_ARGS)]
    lines = formats.job_lines(ads, NOW, width=width).splitlines()
    assert lines[0].split()[:7] == list(tables.QUEUE_COLUMNS[:7])
    row = lines[1].split()
    assert row[:2] == ["123456.7", "someone_long"]
    assert row[5:8] == ["R", "10", "200.0"]
    # Only the command gives way, and never below its heading's width.
    assert all(len(line) <= max(width, len(lines[0])) for line in lines)
    assert lines[1].endswith("..." if width == 80 else "  sim")


def test_a_pipe_does_not_cut() -> None:
    text = formats.job_lines([job(1, 0, Arguments=LONG_ARGS)], NOW, width=None)
    assert text.splitlines()[1].endswith(f"sleep {LONG_ARGS}"[:tables.CMD_WIDTH - 3] + "...")


def test_texttable_aligns_right_columns() -> None:
    text = texttable.render(("A", "NUM"), [("x", "5"), ("yy", "100")], right={"NUM"})
    assert text.splitlines() == ["A   NUM", "x     5", "yy  100"]


# -- the batch view -------------------------------------------------------------------

def test_batch_view_one_line_per_cluster_or_batch_name() -> None:
    ads = [job(5, 0, 2, TotalSubmitProcs=4), job(5, 1, 1, TotalSubmitProcs=4),
           job(5, 3, 5, TotalSubmitProcs=4),
           job(6, 0, 1, JobBatchName="nightly", TotalSubmitProcs=1),
           job(7, 0, 1, JobBatchName="nightly", TotalSubmitProcs=2),
           job(7, 1, 1, JobBatchName="nightly", TotalSubmitProcs=2)]
    lines = formats.batch_lines(ads).splitlines()
    assert lines[0].split() == list(formats.BATCH_COLUMNS)
    assert lines[1].split()[:2] == ["ann", "ID:"] and lines[1].split()[2] == "5"
    # DONE RUN IDLE HOLD TOTAL JOB_IDS: one of four procs has left the queue.
    assert lines[1].split()[-6:] == ["1", "1", "1", "1", "4", "5.0-3"]
    assert lines[2].split()[1] == "nightly"
    assert lines[2].endswith("6.0 ... 7.1")
    assert lines[2].split()[-8:-3] == ["_", "_", "3", "_", "3"]


def test_batch_view_without_totals_counts_the_queue() -> None:
    (row,) = [batch.row() for batch in formats.batches([job(9, 0), job(9, 1)])]
    assert row[3:] == ("_", "_", "2", "_", "2", "9.0-1")


def test_run_view_shows_the_slot() -> None:
    text = formats.run_lines([job(3, 0, 2, RemoteHost="slot1@node7")], NOW)
    assert text.splitlines()[0].split() == list(formats.RUN_COLUMNS)
    assert text.splitlines()[1].split()[-1] == "slot1@node7"


# -- -af and -format ------------------------------------------------------------------

def test_autoformat_values_strings_bare_and_expressions() -> None:
    ads = [job(1, 0, SiteScore=512), job(1, 1)]
    text = formats.autoformat_lines(ads, ["ClusterId", "Owner", "SiteScore * 2"])
    assert text == "1 ann 1024\n1 ann undefined\n"


def test_format_is_printf_like() -> None:
    ads = [job(4, 0, SiteScore=1.5), job(4, 1)]
    pairs = [("%d.", "ClusterId"), ("%d ", "ProcId"), ("%s", "Owner"),
             (" %.1f\\n", "SiteScore")]
    assert formats.format_text(ads, pairs) == "4.0 ann 1.5\n4.1 ann 0.0\n"
    assert formats.format_text([job(1, 0)], [("%v|", "Owner"), ("%V\\n", "Owner")]) == \
        'ann|"ann"\n'


def test_format_refuses_two_conversions() -> None:
    with pytest.raises(FetchworkError, match="one conversion"):
        formats.format_text([job(1, 0)], [("%d %d", "ClusterId")])


# -- -better-analyze -------------------------------------------------------------------

def test_clauses_split_at_top_level_and_only() -> None:
    text = '(Memory >= 4096) && (Cpus > 2 && Arch == "X&&Y") && OpSys == "LINUX"'
    assert requirement_clauses(text) == ["Memory >= 4096", 'Cpus > 2 && Arch == "X&&Y"',
                                     'OpSys == "LINUX"']
    assert requirement_clauses("(a || b)") == ["a || b"]
    assert requirement_clauses("(a) || (b)") == ["(a) || (b)"]


def test_report_counts_slots_per_clause() -> None:
    job_ad = from_dict({**job(12, 0), "Requirements": {
        "$expr": "TARGET.Memory >= 4096 && TARGET.Cpus >= 2"}})
    slots = [from_dict({"Name": f"slot{n}", "Memory": memory, "Cpus": cpus, "Start": start,
                        "State": "Unclaimed", "Activity": "Idle"})
             for n, (memory, cpus, start) in enumerate([(8192, 4, True), (2048, 4, True),
                                                        (8192, 1, True), (8192, 8, False)])]
    text = analyze.report(job_ad, slots, 900)
    assert "[0]           3  TARGET.Memory >= 4096" in text
    assert "[1]           3  TARGET.Cpus >= 2" in text
    assert "Of 4 slots" in text
    assert "      2 are rejected by your job's requirements" in text
    assert "      1 reject your job because of their own requirements (START)" in text
    assert "      1 are able to run your job" in text


def test_report_without_slots_says_no_startd() -> None:
    text = analyze.report(from_dict(job(1, 0)), [], 900)
    assert "No slot has reported in the last 900 s" in text


def test_report_of_a_job_no_slot_matches_warns() -> None:
    job_ad = from_dict({**job(2, 0), "Requirements": {"$expr": "TARGET.Memory > 10"}})
    text = analyze.report(job_ad, [classad2.ClassAd({"Name": "s", "Memory": 1})], 900)
    assert "WARNING: no slot matches this job" in text


# -- single-dash options -----------------------------------------------------------------

@click.command()
@click.option("-w", "--watch", is_flag=True)
@click.option("-af", "-autoformat", "--autoformat", "autoformat", multiple=True)
@click.option("-constraint", "--constraint")
@click.option("--better-analyze")
@click.argument("ids", nargs=-1)
def _sample(**_: object) -> None:
    """A command with condor_q's kinds of options."""


def test_single_dash_words_become_long_options() -> None:
    assert condor_args(_sample, ["-watch", "-constraint", "x", "-better-analyze=1.0", "-w"]) \
        == ["--watch", "-constraint", "x", "--better-analyze=1.0", "-w"]


def test_autoformat_takes_every_following_word() -> None:
    assert condor_args(_sample, ["-af", "Owner", "JobStatus", "-watch", "12"]) == \
        ["--autoformat", "Owner", "--autoformat", "JobStatus", "--watch", "12"]


def test_words_after_double_dash_are_left_alone() -> None:
    assert condor_args(_sample, ["--", "-watch"]) == ["--", "-watch"]


def test_json_without_classads_matches_the_library() -> None:
    data = {"ClusterId": 3, "Requirements": {"$expr": "TARGET.Memory > 5"}, "Cmd": 'a"b',
            "Done": True, "Rate": 2.5e-7, "Gone": {"$expr": "undefined"}, "args": "x"}
    expected = json.loads(from_dict(data).printJson())
    assert formats.json_ready(data) == expected
    assert formats.json_ready({"L": {"$expr": "{1, 2}"}}) is None
