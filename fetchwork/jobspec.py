"""The jobs a Python API call names, as htcondor2 takes them, and its constraints.

A job spec is what `Schedd.act` and `Schedd.edit` accept: a job id
`"12.3"`, a cluster `"12"` or `12`, a list of such ids, or a constraint (a
ClassAd expression as text or a `classad2.ExprTree`). A constraint is kept
as text and evaluated later against each job, exactly as `fetchwork q
-constraint` evaluates it; a text that is no expression fails there with
the command line's message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import classad2

from fetchwork.config.ads import unparse
from fetchwork.config.protocol import job_id, parse_job_id
from fetchwork.errors import JobIdError

_ID_RE = re.compile(r"\s*\d+(\.\d+)?\s*\Z")

Constraint: TypeAlias = str | classad2.ExprTree
JobSpecLike: TypeAlias = str | int | Sequence[str] | classad2.ExprTree


@dataclass(frozen=True)
class JobSpec:
    """Either job ids (`C.P`) and clusters (`C`), or a constraint over the queue."""

    ids: tuple[str, ...] = ()
    constraint: str | None = None

    def named_jobs(self) -> list[str]:
        """The `C.P` ids named one by one, as the queue spells them (`12.00` is `12.0`);
        clusters and constraints name none."""
        named = (parse_job_id(text) for text in self.ids)
        return [job_id(cluster, proc) for cluster, proc in named if proc is not None]


def job_spec(spec: JobSpecLike) -> JobSpec:
    """The JobSpec of what a caller passed (see the module text)."""
    if isinstance(spec, classad2.ExprTree):
        return JobSpec(constraint=constraint_text(spec))
    if isinstance(spec, bool):
        raise TypeError("a job spec is an id, a list of ids or a constraint, not a bool")
    if isinstance(spec, int):
        return JobSpec(ids=(str(spec),))
    if isinstance(spec, str):
        if _ID_RE.match(spec):
            return JobSpec(ids=(spec.strip(),))
        if not spec.strip():
            raise JobIdError("an empty job spec names no job: give an id, a list of ids "
                             "or a constraint")
        return JobSpec(constraint=spec)
    if isinstance(spec, Sequence):
        ids = []
        for item in spec:
            if not isinstance(item, str) or not _ID_RE.match(item):
                raise JobIdError(f"{item!r} is not a job id: every element of a job spec "
                                 "list must be ClusterId.ProcId (12.3) or a cluster (12)")
            ids.append(item.strip())
        if not ids:
            raise JobIdError("an empty list of job ids names no job")
        return JobSpec(ids=tuple(ids))
    raise TypeError("a job spec is an id, a list of ids or a constraint, "
                    f"not {type(spec).__name__}")


def constraint_text(constraint: Constraint | None) -> str | None:
    """A constraint as text; None (every job) for None, empty text and `true`."""
    if constraint is None:
        return None
    if isinstance(constraint, classad2.ExprTree):
        text = unparse(constraint)
    elif isinstance(constraint, str):
        text = constraint
    else:
        raise TypeError("a constraint is ClassAd expression text or a classad2.ExprTree, "
                        f"not {type(constraint).__name__}")
    return None if text.strip().lower() in ("", "true") else text
