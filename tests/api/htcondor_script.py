"""A user's script written for htcondor2's Python bindings, and nothing else.

It is written once and run as it stands against any module with htcondor2's
`Schedd` (`run(htcondor2, ...)` would run it against a real schedd;
tests/api/test_script.py runs it against `fetchwork`): it calls only
htcondor2's interface (`Schedd()`, `Submit`, `JobAction`, the methods'
documented arguments) and records what came back. The tests assert
htcondor2's documented expectations on the record (tests/api/expectations.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import classad2
import htcondor2


@dataclass
class Record:
    """What the script saw, call by call."""

    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)

    def call(self, name: str, do: Callable[[], Any]) -> Any:
        try:
            self.results[name] = do()
        except Exception as exc:  # the script records what each interface raises
            self.errors[name] = exc
            return None
        return self.results[name]


def _until(condition: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.2)


def run(module: ModuleType, workdir: str, timeout_s: float = 60.0) -> Record:
    """The script: submit with itemdata, query with projections and constraints,
    hold/release/remove, edit, history, the job event log; each answer goes into the
    record."""
    record = Record()
    schedd = module.Schedd()

    # Two quick jobs from item data; they exit with the code of their item.
    quick = htcondor2.Submit({
        "executable": "/bin/sh",
        "arguments": "\"-c 'exit $(code)'\"",
        "initialdir": workdir,
        "log": f"{workdir}/quick.log",
        "+Word": '"$(word)"',
    })
    done = record.call("submit_items", lambda: schedd.submit(
        quick, itemdata=iter([{"code": "0", "word": "alpha"}, {"code": "3", "word": "beta"}])))
    # Three sleepers queued on hold, with a count.
    sleeper = htcondor2.Submit({"executable": "/bin/sleep", "arguments": "300",
                                "initialdir": workdir, "hold": "true"})
    held = record.call("submit_count", lambda: schedd.submit(sleeper, count=3))
    if done is None or held is None:
        return record
    quick_id, held_id = done.cluster(), held.cluster()

    # Queries: a constraint string with a projection, an ExprTree, a limit.
    record.call("query_held", lambda: schedd.query(
        constraint=f"ClusterId == {held_id} && JobStatus == 5",
        projection=["ClusterId", "ProcId", "JobStatus"]))
    record.call("query_expr", lambda: schedd.query(
        classad2.ExprTree(f"ClusterId == {held_id} && ProcId >= 1"), ["ProcId"]))
    record.call("query_limit", lambda: schedd.query(f"ClusterId == {held_id}", ["ProcId"],
                                                   limit=1))

    # Edits: one job by id, a refused attribute.
    record.call("edit_one", lambda: schedd.edit(f"{held_id}.0", "Tag", '"edited"'))
    record.call("query_tag", lambda: schedd.query(f"ClusterId == {held_id}",
                                                 ["ProcId", "Tag"]))
    record.call("edit_owner", lambda: schedd.edit(f"{held_id}", "Owner", '"mallory"'))

    # Actions: release one, hold it again and again, remove the cluster.
    record.call("release_one", lambda: schedd.act(htcondor2.JobAction.Release,
                                                  f"{held_id}.1"))
    record.call("hold_twice", lambda: schedd.act(htcondor2.JobAction.Hold,
                                                 [f"{held_id}.0", f"{held_id}.1"],
                                                 reason="held by the script"))
    record.call("query_reason", lambda: schedd.query(f"ClusterId == {held_id} && ProcId == 1",
                                                    ["HoldReason"]))
    record.call("release_last", lambda: schedd.act(htcondor2.JobAction.Release,
                                                   f"ClusterId == {held_id} && ProcId == 2"))
    record.call("release_again", lambda: schedd.act(htcondor2.JobAction.Release,
                                                    f"{held_id}.2"))
    record.call("remove_missing", lambda: schedd.act(htcondor2.JobAction.Remove,
                                                     f"{held_id}.99"))
    record.call("remove_cluster", lambda: schedd.act(htcondor2.JobAction.Remove, held_id))

    # History: the quick jobs once they finished, newest first.
    record.call("drained", lambda: _until(
        lambda: not schedd.query(f"ClusterId == {quick_id} || ClusterId == {held_id}",
                                 ["ProcId"]), timeout_s))
    record.call("history_quick", lambda: schedd.history(
        f"ClusterId == {quick_id}", ["ClusterId", "ProcId", "ExitCode", "JobStatus", "Word"]))
    record.call("history_match", lambda: schedd.history(None, ["ClusterId", "ProcId"], match=1))
    record.call("history_removed", lambda: schedd.history(
        classad2.ExprTree(f"ClusterId == {held_id}"), ["ProcId", "JobStatus"]))

    # The job event log, read the way htcondor2 scripts wait on their jobs.
    def terminated() -> list[Any]:
        events = htcondor2.JobEventLog(f"{workdir}/quick.log").events(0)
        return [event for event in events if event.type == htcondor2.JobEventType.JOB_TERMINATED]

    record.call("log_terminated", lambda: _until(lambda: len(terminated()) == 2, timeout_s))
    record.call("log_events", lambda: [
        (event.type.name, event.cluster, event.proc)
        for event in htcondor2.JobEventLog(f"{workdir}/quick.log").events(0)])

    # A constraint that is no expression.
    record.call("bad_constraint", lambda: schedd.query("ClusterId == ((", ["ProcId"]))
    return record
