"""The submit commands `depends_on` (to `Depends`) and `run_until_canceled`
(to `RunUntilCanceled`).

`depends_on = 12.0, 12.3` names jobs by id (`$(Cluster).0` expands first);
`depends_on = prep` names the jobs of the same submission whose `JobName`
(`+JobName = "prep"`) is `prep`. The ad's `Depends` holds full job ids
("12.0,12.3"); the broker refuses a missing job or a cycle.
`run_until_canceled = true` keeps the job's slot after its command exits,
until its AllowedJobDuration ends or it is removed (starter/keepslot.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fetchwork.config import convert
from fetchwork.config.protocol import clip, job_id
from fetchwork.errors import SubmitFileError
from fetchwork.submit.submitmap import SubmitContext

COMMAND = "depends_on"
RUN_UNTIL_CANCELED = "run_until_canceled"
_JOB_ID_RE = re.compile(r"\A\d+\.\d+\Z")
_NAME_RE = re.compile(r"\A[A-Za-z_][\w.\-]*\Z")
# Names still to resolve, kept in the ad until the whole description is read.
_PENDING = "FetchworkDependsOnNames"


def job_attrs(values: Mapping[str, str], ctx: SubmitContext) -> dict[str, Any]:
    """The attributes these commands give one job (expanded commands, lower-case names)."""
    attrs: dict[str, Any] = {}
    if values.get(COMMAND, "").strip():
        attrs.update(tokens(values[COMMAND], ctx))
    text = values.get(RUN_UNTIL_CANCELED, "").strip()
    if text:
        try:
            attrs["RunUntilCanceled"] = convert.to_bool(text)
        except ValueError as exc:
            raise ctx.fail(f"{RUN_UNTIL_CANCELED} must be true or false, got {text!r}",
                           RUN_UNTIL_CANCELED) from exc
    return attrs


def tokens(value: str, ctx: SubmitContext) -> dict[str, Any]:
    """The attributes `depends_on = value` gives a job: ids now, names once every
    job of the description is known (see `resolve`)."""
    ids: list[str] = []
    names: list[str] = []
    for token in value.replace(",", " ").split():
        if _JOB_ID_RE.match(token):
            ids.append(token)
        elif _NAME_RE.match(token):
            names.append(token)
        else:
            raise ctx.fail(f"{COMMAND}: {clip(token)!r} is neither a job id (12.0) "
                           "nor a JobName", COMMAND)
    attrs: dict[str, Any] = {"Depends": ",".join(dict.fromkeys(ids))}
    if names:
        attrs[_PENDING] = ",".join(names)
    return attrs


def resolve(ads: Sequence[dict[str, Any]], cluster_id: int, source: str,
            lines: Sequence[int]) -> None:
    """Replace the JobName values of every ad's depends_on by the ids of the jobs of
    this description with that JobName; SubmitFileError for a name no job has."""
    by_name: dict[str, list[str]] = {}
    for proc, ad in enumerate(ads):
        name = next((v for k, v in ad.items() if k.lower() == "jobname"), None)
        if isinstance(name, str):
            by_name.setdefault(name, []).append(job_id(cluster_id, proc))
    for ad in ads:
        pending = ad.pop(_PENDING, None)
        if not pending:
            continue
        ids = ad["Depends"].split(",") if ad.get("Depends") else []
        for name in pending.split(","):
            if name not in by_name:
                raise SubmitFileError(f"{COMMAND}: no job of this submission has "
                                      f"JobName {name!r}", source, max(lines, default=0) or None)
            ids += by_name[name]
        ad["Depends"] = ",".join(dict.fromkeys(ids))
