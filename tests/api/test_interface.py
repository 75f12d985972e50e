"""fetchwork.Schedd against htcondor2's own interface, read from the installed
htcondor2: the methods a script calls take the same arguments, in the same
order, with the same defaults; SubmitResult has htcondor2's methods; every
JobAction is either carried out or refused with a fetchwork error; and
`import fetchwork` stays light until the API is used."""

from __future__ import annotations

import inspect
import subprocess
import sys

import htcondor2
import pytest

import fetchwork
from fetchwork.errors import FetchworkError, JobActionError
from fetchwork.schedd import ACTIONS, REFUSED, Schedd, SubmitResult, _action

# The methods scripts call, and the arguments of each that scripts pass.
METHODS = {
    "submit": ["description", "count", "spool", "itemdata", "queue"],
    "query": ["constraint", "projection", "callback", "limit", "opts"],
    "act": ["action", "job_spec", "reason"],
    "history": ["constraint", "projection", "match", "since"],
    "edit": ["job_spec", "attr", "value", "flags"],
    "spool": ["result"],
    "retrieve": ["job_spec"],
}


def _params(cls: type, method: str) -> list[inspect.Parameter]:
    return list(inspect.signature(getattr(cls, method)).parameters.values())[1:]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_arguments_are_htcondor2s_in_order(method: str) -> None:
    ours = [param.name for param in _params(Schedd, method)]
    theirs = [param.name for param in _params(htcondor2.Schedd, method)]
    assert theirs[:len(METHODS[method])] == METHODS[method]
    assert ours[:len(METHODS[method])] == METHODS[method]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_defaults_are_htcondor2s(method: str) -> None:
    theirs = {param.name: param.default for param in _params(htcondor2.Schedd, method)}
    for param in _params(Schedd, method):
        if param.name not in METHODS[method] or theirs[param.name] is inspect.Parameter.empty:
            continue
        default, expected = param.default, theirs[param.name]
        if param.name in ("itemdata", "opts", "flags"):
            continue  # a sentinel or an enum default on both sides: behaviour tested elsewhere
        if isinstance(expected, list):  # htcondor2 writes `projection=[]`
            assert list(default) == expected, (method, param.name)
        elif isinstance(expected, str):  # 'True' and 'true' are one constraint
            assert str(default).lower() == expected.lower(), (method, param.name)
        else:
            assert default == expected, (method, param.name)


def test_submit_result_has_htcondor2s_methods() -> None:
    theirs = {name for name in vars(htcondor2.SubmitResult) if not name.startswith("_")}
    ours = {name for name in vars(SubmitResult) if not name.startswith("_")}
    assert theirs <= ours
    result = SubmitResult(12, 0, 2, [{"Cmd": "/bin/true", "A": 1}, {"Cmd": "/bin/true", "A": 2}])
    assert (result.cluster(), result.first_proc(), result.num_procs(), int(result)) == \
        (12, 0, 2, 12)
    assert result.clusterad()["ClusterId"] == 12 and "A" not in result.clusterad()
    assert result.procad(1)["A"] == 2 and result.procad()["ProcId"] == 0


@pytest.mark.parametrize("action", list(htcondor2.JobAction))
def test_every_job_action_is_done_or_refused_clearly(action: htcondor2.JobAction) -> None:
    key = action.name.lower()
    assert (key in ACTIONS) != (key in REFUSED)
    if key in ACTIONS:
        assert _action(action) == _action(action.name) == ACTIONS[key]
    else:
        with pytest.raises(JobActionError, match=action.name):
            _action(action)


def test_hold_release_remove_and_vacate_are_done() -> None:
    assert [_action(name) for name in ("Hold", "Release", "Remove", "Vacate")] == \
        ["hold", "release", "remove", "requeue"]


def test_an_unknown_action_or_type_is_refused() -> None:
    with pytest.raises(JobActionError, match="no job action 'Pause'"):
        _action("Pause")
    with pytest.raises(TypeError):
        _action(3)  # type: ignore[arg-type]
    assert issubclass(JobActionError, FetchworkError)


def test_the_package_exports_the_api_and_is_typed() -> None:
    assert fetchwork.Schedd is Schedd and fetchwork.SubmitResult is SubmitResult
    assert "Schedd" in fetchwork.__all__
    from importlib import resources
    assert resources.files("fetchwork").joinpath("py.typed").is_file()
    with pytest.raises(AttributeError):
        fetchwork.NoSuchThing  # noqa: B018


def test_import_fetchwork_does_not_load_the_api() -> None:
    code = ("import sys, fetchwork; "
            "print(any(m in sys.modules for m in ('redis', 'htcondor2', 'fetchwork.schedd')))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout
    assert shown.strip() == "False"
