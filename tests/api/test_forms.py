"""The forms htcondor2's Schedd takes, as pure functions: a description and its
queue statement into submit text (fetchwork/description.py), and a job spec
into ids or a constraint (fetchwork/jobspec.py)."""

from __future__ import annotations

import classad2
import htcondor2
import pytest

from fetchwork.description import UNIT_SEPARATOR, submit_text
from fetchwork.errors import JobIdError, SubmitFileError
from fetchwork.jobspec import JobSpec, constraint_text, job_spec

US = UNIT_SEPARATOR


def test_text_with_its_own_queue_statements_goes_through_as_written() -> None:
    text = "executable = /bin/true\nqueue 1\narguments = x\nqueue 2"
    assert submit_text(text) == text + "\n"


def test_text_without_a_queue_statement_queues_one_job() -> None:
    assert submit_text("executable = /bin/true\n").splitlines() == \
        ["executable = /bin/true", "queue"]


def test_a_submit_objects_count_is_replaced_and_its_items_written_again() -> None:
    sub = htcondor2.Submit("executable = /bin/echo\nqueue 2 item from (\n  a b\n  c\n)\n")
    assert submit_text(sub).splitlines()[1:] == ["queue 2 item from (", "a b", "c", ")"]
    assert submit_text(sub, count=5).splitlines()[1] == "queue 5 item from ("
    plain = htcondor2.Submit("executable = /bin/echo\nqueue 3\n")
    assert submit_text(plain, count=4).splitlines()[1] == "queue 4"


def test_itemdata_of_dicts_names_the_first_ones_keys() -> None:
    lines = submit_text({"executable": "/bin/echo"},
                        itemdata=iter([{"x": 1, "y": "a,b"}, {"x": 2}])).splitlines()
    assert lines[1:] == ["queue x,y from (", f"1{US}a,b", f"2{US}", ")"]
    assert submit_text({"executable": "/bin/echo"}, count=2,
                       itemdata=[{"x": 1}]).splitlines()[1] == "queue 2 x from ("


def test_itemdata_of_strings_sets_item_and_none_queues_plainly() -> None:
    assert submit_text({"executable": "/bin/echo"}, itemdata=[" a b ", "c"]).splitlines()[1:] \
        == ["queue item from (", "a b", "c", ")"]
    assert submit_text({"executable": "/bin/echo"}, count=3, itemdata=None).splitlines()[1] \
        == "queue 3"


def test_queue_replaces_the_statement() -> None:
    assert submit_text({"executable": "/bin/echo"}, queue="2").splitlines()[1] == "queue 2"
    assert submit_text({"executable": "/bin/echo"}, queue="queue 3").splitlines()[1] == \
        "queue 3"


@pytest.mark.parametrize("call, error", [
    (lambda: submit_text({"executable": "x"}, count=2, queue="3"), SubmitFileError),
    (lambda: submit_text({"executable": "x"}, count=-1), SubmitFileError),
    (lambda: submit_text({"executable": "x"}, itemdata=["a\nb"]), SubmitFileError),
    (lambda: submit_text({"executable": "x"}, itemdata=[{1: "a"}]), SubmitFileError),
    (lambda: submit_text({"executable": "x"}, itemdata=["a", {"b": 1}]), TypeError),
    (lambda: submit_text({"executable": "x"}, itemdata=[3]), TypeError),
    (lambda: submit_text(3.5), TypeError),  # type: ignore[arg-type]
])
def test_bad_forms_are_refused(call, error) -> None:
    with pytest.raises(error):
        call()


@pytest.mark.parametrize("spec, expected", [
    ("12.3", JobSpec(ids=("12.3",))),
    (" 12 ", JobSpec(ids=("12",))),
    (12, JobSpec(ids=("12",))),
    (["1.0", "2"], JobSpec(ids=("1.0", "2"))),
    ("Owner == \"ann\"", JobSpec(constraint="Owner == \"ann\"")),
    (classad2.ExprTree("ClusterId > 3"), JobSpec(constraint="ClusterId > 3")),
])
def test_job_specs_are_htcondor2s(spec, expected) -> None:
    assert job_spec(spec) == expected


def test_named_jobs_are_spelled_as_the_queue_spells_them() -> None:
    assert job_spec(["12.00", "3", "4.1"]).named_jobs() == ["12.0", "4.1"]
    assert job_spec("ClusterId == 1").named_jobs() == []


@pytest.mark.parametrize("spec", [[], ["1.0", "x"], [1], "  "])
def test_bad_job_specs_are_refused(spec) -> None:
    with pytest.raises(JobIdError):
        job_spec(spec)


def test_constraints_as_text() -> None:
    assert constraint_text(None) is None
    assert constraint_text("True") is None and constraint_text(" ") is None
    assert constraint_text(classad2.ExprTree("true")) is None
    assert constraint_text(classad2.ExprTree("A  >  1")) == "A > 1"
    with pytest.raises(TypeError):
        constraint_text(5)  # type: ignore[arg-type]
