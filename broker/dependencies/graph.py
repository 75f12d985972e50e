"""The dependency graph of jobs (`depends_on`, the `Depends` attribute): pure decisions.

A job that depends on others waits BLOCKED until every one of them is
COMPLETED with ExitCode 0 (the scheduler text's /depend: the dependency
table reorders jobs; by default they run first come, first served). A
dependency that fails, is removed or completes otherwise can never be
satisfied: the dependent job FAILS, naming it, and so, in turn, do the jobs
that depend on that one. A submission whose jobs depend on each other in a
cycle, or on a job that does not exist, is refused. No Redis here: the
broker's resolver (broker/dependencies/resolver.py) reads the states and applies the
decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fetchwork.config.ads import EXPR_KEY
from fetchwork.config.protocol import job_id, job_id_key, parse_job_id
from fetchwork.errors import DependencyError, JobIdError

# The job attribute that names a job's dependencies: full job ids, "12.0,12.3".
DEPENDS_ATTR = "Depends"


@dataclass(frozen=True)
class DepState:
    """What a dependency's ad says: its FetchworkState, ExitCode and RemoveReason."""

    state: str | None
    exit_code: Any = None
    remove_reason: Any = None


class Verdict(enum.Enum):
    READY = "ready"
    WAIT = "wait"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    """What becomes of a waiting job: its verdict, the dependencies it still waits on,
    and the BlockedReason (WAIT) or RemoveReason (FAIL)."""

    verdict: Verdict
    waiting_on: tuple[str, ...] = ()
    reason: str = ""


def parse_depends(value: Any) -> list[str]:
    """A `Depends` value (a list of job ids, or one string of ids separated by commas
    or spaces) as full job ids `C.P`, in order, without repeats."""
    if isinstance(value, dict) and isinstance(value.get(EXPR_KEY), str):
        # A ClassAd list of strings: { "12.0", "12.3" }.
        text = value[EXPR_KEY].strip()
        if text.startswith("{") and text.endswith("}"):
            value = text[1:-1].replace('"', " ")
    if isinstance(value, str):
        items: Iterable[Any] = value.replace(",", " ").split()
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise DependencyError(f"Depends must be a list of job ids (C.P), not {value!r}")
    ids: list[str] = []
    for item in items:
        text = str(item).strip()
        try:
            cluster, proc = parse_job_id(text)
        except JobIdError as exc:
            raise DependencyError(f"Depends: {exc}") from exc
        if proc is None:
            raise DependencyError(f"Depends: {text!r} is a cluster; name jobs as C.P (12.0)")
        full = job_id(cluster, proc)
        if full not in ids:
            ids.append(full)
    return ids


def id_list(ids: Iterable[str]) -> str:
    """Job ids as a `Depends` value: "12.0,12.3"."""
    return ",".join(ids)


def blocked_reason(waiting_on: Sequence[str]) -> str:
    """The BlockedReason of a job waiting on `waiting_on`."""
    noun = "dependency" if len(waiting_on) == 1 else "dependencies"
    return f"waiting for {noun} {', '.join(waiting_on)} to complete with ExitCode 0"


def failure_of(dep_id: str, dep: DepState | None) -> str | None:
    """Why dependency `dep_id` can never be satisfied, or None while it still may be."""
    if dep is None or dep.state is None:
        return f"dependency {dep_id} does not exist"
    if dep.state == "COMPLETED":
        code = dep.exit_code
        if isinstance(code, int) and not isinstance(code, bool) and code == 0:
            return None
        if isinstance(code, int) and not isinstance(code, bool):
            return f"dependency {dep_id} completed with ExitCode {code}"
        return f"dependency {dep_id} completed without ExitCode 0"
    if dep.state in ("REMOVED", "FAILED"):
        why = f": {dep.remove_reason}" if isinstance(dep.remove_reason, str) \
            and dep.remove_reason else ""
        verb = "was removed" if dep.state == "REMOVED" else "failed"
        return f"dependency {dep_id} {verb}{why}"
    return None


def satisfied(dep: DepState | None) -> bool:
    return dep is not None and dep.state == "COMPLETED" and failure_of("", dep) is None


def decide(waiting_on: Sequence[str], states: Mapping[str, DepState | None]) -> Decision:
    """READY when every dependency completed with ExitCode 0; FAIL naming the first one
    that cannot complete so; else WAIT for those still unfinished."""
    left: list[str] = []
    for dep_id in waiting_on:
        dep = states.get(dep_id)
        failure = failure_of(dep_id, dep)
        if failure is not None:
            return Decision(Verdict.FAIL, tuple(waiting_on), failure)
        if not satisfied(dep):
            left.append(dep_id)
    if not left:
        return Decision(Verdict.READY)
    return Decision(Verdict.WAIT, tuple(left), blocked_reason(left))


def find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle of `graph` (job -> the jobs it depends on) as the path of
    job ids that closes it (first id repeated at the end), or None."""
    done: set[str] = set()
    for root in sorted(graph, key=job_id_key):
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [iter(graph[root])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                on_path.discard(path[-1])
                done.add(path.pop())
            elif nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            elif nxt in graph and nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(graph[nxt]))
    return None


def check_submission(graph: Mapping[str, Sequence[str]], cluster: int,
                     submitted: Collection[str], existing: Mapping[str, DepState | None]) -> None:
    """Refuse (DependencyError) a submission to `cluster` (the jobs `submitted`; `graph`:
    job -> its dependencies) whose jobs depend on a job that does not exist or on each
    other in a cycle. `existing` holds the state of every dependency outside it."""
    for job, deps in sorted(graph.items(), key=lambda item: job_id_key(item[0])):
        for dep in deps:
            inside = job_id_key(dep)[0] == cluster
            if (inside and dep not in submitted) or (not inside and existing.get(dep) is None):
                raise DependencyError(f"job {job} depends on job {dep}, which does not exist; "
                                      "nothing was queued")
            if dep == job:
                raise DependencyError(f"job {job} depends on itself; nothing was queued")
    cycle = find_cycle({job: [d for d in deps if d in graph] for job, deps in graph.items()})
    if cycle is not None:
        raise DependencyError(f"jobs {' -> '.join(cycle)} depend on each other in a cycle; "
                              "nothing was queued")
