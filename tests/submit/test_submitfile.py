"""Submit descriptions to job ads: macros, queue forms, the command mapping, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchwork.config.argsyntax import format_arguments_raw as format_arguments
from fetchwork.config.argsyntax import parse_arguments_raw
from fetchwork.errors import FetchworkError, SubmitFileError
from fetchwork.submit.submitfile import (
    command_jobs,
    logical_lines,
    parse_submit,
    split_qargs,
)


def jobs(text: str, tmp_path: Path, cluster: int = 7, **kwargs: object) -> list[dict]:
    return parse_submit(text, cluster, submit_dir=str(tmp_path), **kwargs).ads  # type: ignore[arg-type]


def error_of(text: str, tmp_path: Path) -> SubmitFileError:
    with pytest.raises(SubmitFileError) as caught:
        parse_submit(text, 1, submit_dir=str(tmp_path), source="job.sub")
    return caught.value


# -- queue forms ---------------------------------------------------------------

def test_plain_queue_is_one_job(tmp_path: Path) -> None:
    ads = jobs("executable = /bin/true\nqueue\n", tmp_path)
    assert len(ads) == 1
    assert ads[0]["Cmd"] == "/bin/true"
    assert not {"ClusterId", "ProcId", "Owner"} & set(ads[0])  # the broker decides them


def test_queue_n_expands_process_and_cluster(tmp_path: Path) -> None:
    ads = jobs("executable = /bin/echo\narguments = $(Cluster).$(Process)\n"
               "output = out.$(Process)\nqueue 3\n", tmp_path, cluster=42)
    assert [ad["Out"] for ad in ads] == ["out.0", "out.1", "out.2"]
    assert [ad["Args"] for ad in ads] == ["42.0", "42.1", "42.2"]


def test_queue_count_from_a_macro(tmp_path: Path) -> None:
    ads = jobs("N = 2\nexecutable = /bin/true\nqueue $(N) * 2\n", tmp_path)
    assert len(ads) == 4


def test_queue_zero_queues_nothing(tmp_path: Path) -> None:
    assert jobs("executable = /bin/true\nqueue 0\n", tmp_path) == []


def test_queue_in_list_sets_named_variable(tmp_path: Path) -> None:
    ads = jobs("executable = /bin/echo\narguments = $(Word) $(ItemIndex)\n"
               "queue Word in (alpha, beta, gamma)\n", tmp_path)
    assert [ad["Args"] for ad in ads] == ["alpha 0", "beta 1", "gamma 2"]


def test_queue_in_without_variable_uses_item(tmp_path: Path) -> None:
    ads = jobs("executable = /bin/echo\narguments = $(Item)\nqueue in (p q)\n", tmp_path)
    assert [ad["Args"] for ad in ads] == ["p", "q"]


def test_count_per_item_and_step(tmp_path: Path) -> None:
    ads = jobs("executable = /bin/echo\narguments = $(Item)-$(Step)-$(Process)\n"
               "queue 2 in (a, b)\n", tmp_path)
    assert [ad["Args"] for ad in ads] == ["a-0-0", "a-1-1", "b-0-2", "b-1-3"]


def test_queue_from_file_relative_to_submit_dir(tmp_path: Path) -> None:
    (tmp_path / "inputs.txt").write_text("one.dat 1\ntwo.dat 2\n")
    ads = jobs("executable = /bin/echo\narguments = $(File) $(N)\n"
               "queue File, N from inputs.txt\n", tmp_path)
    assert [ad["Args"] for ad in ads] == ["one.dat 1", "two.dat 2"]


def test_queue_from_inline_block(tmp_path: Path) -> None:
    text = ("executable = /bin/echo\narguments = $(A)+$(B)\n"
            "queue A, B from (\n  1 2\n  3 4\n)\n")
    assert [ad["Args"] for ad in jobs(text, tmp_path)] == ["1+2", "3+4"]


def test_queue_matching_globs_in_submit_dir(tmp_path: Path) -> None:
    for name in ("x1.csv", "x2.csv", "y.txt"):
        (tmp_path / name).write_text("")
    ads = jobs("executable = /bin/cat\ninput = $(Data)\nqueue Data matching *.csv\n", tmp_path)
    assert sorted(ad["In"] for ad in ads) == ["x1.csv", "x2.csv"]


def test_several_queue_statements_accumulate(tmp_path: Path) -> None:
    text = ("executable = /bin/echo\narguments = first\nqueue 2\n"
            "arguments = second $(Process)\npriority = 3\nqueue\n")
    ads = jobs(text, tmp_path)
    assert [ad["Args"] for ad in ads] == ["first", "first", "second 2"]
    assert "JobPrio" not in ads[0] and ads[2]["JobPrio"] == 3


def test_if_blocks_and_continuation_lines(tmp_path: Path) -> None:
    text = ("executable = /bin/echo\nif true\n  arguments = yes \\\n  and more\nelse\n"
            "  arguments = no\nendif\nqueue\n")
    assert jobs(text, tmp_path)[0]["Args"] == "yes and more"


@pytest.mark.parametrize("qargs, expected", [
    ("", ("", "", "")),
    ("3", ("3", "", "")),
    ("$(N)", ("$(N)", "", "")),
    ("X in (a, b)", ("", "X", "in (a, b)")),
    ("2 X,Y from list.txt", ("2", "X,Y", "from list.txt")),
    ("in (a b)", ("", "", "in (a b)")),
    ("F matching files *.dat", ("", "F", "matching files *.dat")),
])
def test_split_qargs(qargs: str, expected: tuple[str, str, str]) -> None:
    assert split_qargs(qargs) == expected


def test_logical_lines_keep_first_line_number() -> None:
    lines = logical_lines("a = 1\nb = 2 \\\n 3\nc = 4\n")
    assert [(s.line, s.end, s.text) for s in lines] == [
        (1, 1, "a = 1"), (2, 3, "b = 2  3"), (4, 4, "c = 4")]


# -- the command mapping ---------------------------------------------------------

def test_new_syntax_arguments_and_environment(tmp_path: Path) -> None:
    ad = jobs("executable = /bin/echo\narguments = \"a 'b c' \"\"q\"\"\"\n"
              "environment = \"A=1 B='x y'\"\nqueue\n", tmp_path)[0]
    assert ad["Arguments"] == "a 'b c' \"q\""
    assert ad["Environment"] == "A=1 B='x y'"
    assert "Args" not in ad and "Env" not in ad


def test_old_syntax_arguments_and_environment(tmp_path: Path) -> None:
    ad = jobs("executable = /bin/echo\narguments = a b c\nenvironment = A=1;B=2\nqueue\n",
              tmp_path)[0]
    assert ad["Args"] == "a b c" and ad["Env"] == "A=1;B=2"
    escaped = jobs('executable = /bin/echo\narguments = say \\"hi\\"\nqueue\n', tmp_path)[0]
    assert escaped["Args"] == 'say \\"hi\\"'


def test_paths_initialdir_and_io(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    ad = jobs("executable = job.sh\ninitialdir = run\ninput = in.txt\noutput = o.txt\n"
              "error = e.txt\nqueue\n", tmp_path)[0]
    assert ad["Cmd"] == str(script)
    assert ad["Iwd"] == str(tmp_path / "run")
    assert (ad["In"], ad["Out"], ad["Err"]) == ("in.txt", "o.txt", "e.txt")


def test_iwd_defaults_to_submit_dir(tmp_path: Path) -> None:
    assert jobs("executable = /bin/true\nqueue\n", tmp_path)[0]["Iwd"] == str(tmp_path)


@pytest.mark.parametrize("memory, expected_mb", [
    ("512", 512), ("1G", 1024), ("1 GB", 1024), ("1.5g", 1536), ("2048K", 2), ("100KB", 1),
    ("1T", 1024 * 1024),
])
def test_request_memory_units(tmp_path: Path, memory: str, expected_mb: int) -> None:
    ad = jobs(f"executable = /bin/true\nrequest_memory = {memory}\nqueue\n", tmp_path)[0]
    assert ad["RequestMemory"] == expected_mb


@pytest.mark.parametrize("disk, expected_kb", [("100", 100), ("1M", 1024), ("2G", 2 * 1024**2)])
def test_request_disk_in_kb(tmp_path: Path, disk: str, expected_kb: int) -> None:
    ad = jobs(f"executable = /bin/true\nrequest_disk = {disk}\nqueue\n", tmp_path)[0]
    assert ad["RequestDisk"] == expected_kb


def test_requests_requirements_rank_priority(tmp_path: Path) -> None:
    ad = jobs("executable = /bin/true\nrequest_cpus = 2\nrequirements = TARGET.Memory >= 100\n"
              "rank = TARGET.Cpus\npriority = -4\nqueue\n", tmp_path)[0]
    assert ad["RequestCpus"] == 2 and ad["JobPrio"] == -4
    assert ad["Requirements"] == {"$expr": "TARGET.Memory >= 100"}
    assert ad["Rank"] == {"$expr": "TARGET.Cpus"}


def test_request_memory_expression_kept(tmp_path: Path) -> None:
    ad = jobs("executable = /bin/true\nrequest_memory = ifThenElse(MemoryUsage =?= undefined, "
              "100, MemoryUsage * 2)\nqueue\n", tmp_path)[0]
    assert "ifThenElse" in ad["RequestMemory"]["$expr"]


def test_hold_true_marks_job(tmp_path: Path) -> None:
    held = jobs("executable = /bin/true\nhold = true\nqueue\n", tmp_path)[0]
    free = jobs("executable = /bin/true\nhold = false\nqueue\n", tmp_path)[0]
    assert held["Hold"] is True and "Hold" not in free


def test_plus_and_my_attributes_verbatim(tmp_path: Path) -> None:
    ad = jobs('executable = /bin/true\n+Project = "p$(Process)"\nMY.Weight = 2 * 3\n'
              "+Flag = true\nqueue\n", tmp_path)[0]
    assert ad["Project"] == "p0"
    assert ad["Weight"] == {"$expr": "2 * 3"}
    assert ad["Flag"] is True


def test_plus_attribute_overrides_a_mapped_one_whatever_its_case(tmp_path: Path) -> None:
    ad = jobs("executable = /bin/true\npriority = 2\n+jobprio = 9\nqueue\n", tmp_path)[0]
    assert [name for name in ad if name.lower() == "jobprio"] == ["jobprio"]
    assert ad["jobprio"] == 9


def test_universe(tmp_path: Path) -> None:
    ad = jobs("universe = Vanilla\nexecutable = /bin/true\nqueue\n", tmp_path)[0]
    assert ad["JobUniverse"] == 5


def test_extra_commands_mapped(tmp_path: Path) -> None:
    ad = jobs("executable = /bin/true\nbatch_name = nightly\nkill_sig = SIGINT\n"
              "job_lease_duration = 60\nqueue\n", tmp_path)[0]
    assert (ad["JobBatchName"], ad["KillSig"], ad["JobLeaseDuration"]) == ("nightly", "SIGINT", 60)


def test_unsupported_commands_warn(tmp_path: Path) -> None:
    parsed = parse_submit("executable = /bin/true\nlog_xml = true\nqueue\n", 1,
                          submit_dir=str(tmp_path))
    assert parsed.warnings == ["<submit>: these commands are not supported by fetchwork and "
                               "were ignored: log_xml (line 2)"]


def test_log_is_the_user_log_under_initialdir(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    ads = jobs("executable = /bin/true\ninitialdir = run\nlog = logs/../job.log\nqueue\n"
               "log = /var/tmp/abs.log\nqueue\n", tmp_path)
    assert [ad["UserLog"] for ad in ads] == [str(tmp_path / "run" / "job.log"),
                                             "/var/tmp/abs.log"]
    assert "UserLog" not in jobs("executable = /bin/true\nqueue\n", tmp_path)[0]


def test_transfer_executable_false_skips_check(tmp_path: Path) -> None:
    ad = jobs("executable = /nowhere/prog\ntransfer_executable = false\nqueue\n", tmp_path)[0]
    assert ad["Cmd"] == "/nowhere/prog"


def test_does_not_change_working_directory(tmp_path: Path) -> None:
    before = os.getcwd()
    (tmp_path / "l.txt").write_text("a\n")
    jobs("executable = /bin/true\nqueue X from l.txt\n", tmp_path)
    assert os.getcwd() == before


# -- errors name the line ---------------------------------------------------------

@pytest.mark.parametrize("text, line, words", [
    ("executable = /bin/true\nthis is not a command\nqueue\n", 2, "command = value"),
    ("executable = /bin/true\nuniverse = docker\nqueue\n", 2, "universe docker"),
    ("executable = /bin/true\nrequirements = (( x\nqueue\n", 2, "requirements"),
    ("executable = /bin/true\n+Bad = [ a = \nqueue\n", 2, "not a ClassAd expression"),
    ("executable = /bin/true\npriority = high\nqueue\n", 2, "priority must be a whole number"),
    ("executable = /bin/true\nhold = maybe\nqueue\n", 2, "hold must be true or false"),
    ("executable = /nonexistent/prog\nqueue\n", 1, "not an executable file"),
    ("executable = /bin/true\ninitialdir = /nonexistent/dir\nqueue\n", 2, "initialdir"),
    ('executable = /bin/true\narguments = "a \'b"\nqueue\n', 2, "unbalanced single quote"),
    ('executable = /bin/true\narguments = a "b" c\nqueue\n', 2, "double quote"),
    ("executable = /bin/true\nqueue foo bar baz\n", 2, "queue"),
    ("executable = /bin/true\nqueue X from missing.txt\n", 2, "missing.txt"),
    ("executable = /bin/true\nqueue X from (\n a\n", 2, "closing"),
    ("executable = /bin/true\nqueue -3\n", 2, "whole number"),
    ("executable = /bin/true\nendif\nqueue\n", 2, "endif"),
    ("include : other.sub\nqueue\n", 1, "include"),
])
def test_errors_name_the_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    error = error_of(text, tmp_path)
    assert error.line == line, str(error)
    assert words in str(error)
    assert str(error).startswith(f"job.sub:{line}: ")


def test_library_messages_go_into_the_error_not_stderr(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    error = error_of("executable = /bin/true\nelse\nqueue\n", tmp_path)
    assert "else without matching if" in str(error)
    assert capfd.readouterr().err == ""


def test_missing_executable_and_missing_queue(tmp_path: Path) -> None:
    error = error_of("arguments = x\nqueue\n", tmp_path)
    assert "no executable" in str(error) and error.line == 2
    assert "no queue statement" in str(error_of("executable = /bin/true\n", tmp_path))


def test_error_in_a_later_queue_block_fails_everything(tmp_path: Path) -> None:
    text = "executable = /bin/true\nqueue 5\nuniverse = grid\nqueue\n"
    assert error_of(text, tmp_path).line == 3


def test_error_names_the_definition_in_force(tmp_path: Path) -> None:
    text = "executable = /bin/true\npriority = high\nqueue\npriority = 3\nqueue\n"
    assert error_of(text, tmp_path).line == 2


def test_submit_error_is_a_fetchwork_error() -> None:
    assert issubclass(SubmitFileError, FetchworkError)


# -- jobs from a command line ---------------------------------------------------------

def test_command_jobs_find_program_on_path_and_keep_arguments(tmp_path: Path) -> None:
    parsed = command_jobs(["echo", "a b", "$(Process)", "it's"], 9, count=2,
                          commands={"output": "out.$(Process)", "priority": "2"},
                          submit_dir=str(tmp_path))
    assert len(parsed.ads) == 2
    ad = parsed.ads[1]
    assert os.path.basename(ad["Cmd"]) == "echo" and os.path.isabs(ad["Cmd"])
    assert ad["Arguments"] == "'a b' $(Process) 'it''s'"
    assert (ad["Out"], ad["JobPrio"]) == ("out.1", 2)


def test_command_jobs_unknown_program(tmp_path: Path) -> None:
    with pytest.raises(SubmitFileError, match="not found on PATH"):
        command_jobs(["no-such-program-xyz"], 1, submit_dir=str(tmp_path))


@pytest.mark.parametrize("words, text", [
    (["a", "b"], "a b"), (["a b"], "'a b'"), ([""], "''"), (["x'y"], "'x''y'"),
    (['say "hi"'], "'say \"hi\"'"),
])
def test_format_arguments(words: list[str], text: str) -> None:
    assert format_arguments(words) == text


# -- properties ------------------------------------------------------------------------

_WORD = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(_WORD, min_size=1, max_size=6))
def test_format_arguments_round_trips_through_the_starter_parser(words: list[str]) -> None:
    assert parse_arguments_raw(format_arguments(words)) == words


@settings(max_examples=60, deadline=None)
@given(st.lists(_WORD.filter(lambda w: "$" not in w), min_size=1, max_size=4))
def test_new_syntax_arguments_in_a_file_reach_the_job_intact(words: list[str]) -> None:
    quoted = '"' + format_arguments(words).replace('"', '""') + '"'
    ad = parse_submit(f"executable = /bin/true\narguments = {quoted}\nqueue\n", 1).ads[0]
    assert parse_arguments_raw(ad["Arguments"]) == words
