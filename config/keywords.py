"""The job-hook knobs: which keyword a slot uses and what each hook is.

`SLOT<N>_JOB_HOOK_KEYWORD` falls back to `STARTD_JOB_HOOK_KEYWORD`; a hook is
`<KEYWORD>_HOOK_<NAME>`, with optional `<KEYWORD>_HOOK_<NAME>_ARGS` and
`<KEYWORD>_HOOK_<NAME>_TIMEOUT`. Where a keyword sets no timeout, the default
is `HOOK_TIMEOUT_<NAME>` from defaults.conf (HTCondor has no timeout for the
fetch and prepare hooks; a hung hook there would stop a slot forever).
"""

from __future__ import annotations

import re
from typing import Any

from fetchwork.config.loader import Config

FETCH_WORK = "FETCH_WORK"
REPLY_FETCH = "REPLY_FETCH"
EVICT_CLAIM = "EVICT_CLAIM"
PREPARE_JOB = "PREPARE_JOB"
UPDATE_JOB_INFO = "UPDATE_JOB_INFO"
JOB_EXIT = "JOB_EXIT"
# Not one of HTCondor's: run once per slot when the startd exits, with the slot ad.
WITHDRAW_SLOT = "WITHDRAW_SLOT"
# The hooks a starter runs.
STARTER_HOOKS = (PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT)
_STARTER_HOOK_KNOBS = tuple(f"_HOOK_{hook}" for hook in STARTER_HOOKS)


_SLOT_KEYWORD = re.compile(r"SLOT\d+_JOB_HOOK_KEYWORD")


def _nonempty(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None


def slot_keyword(config: Config, slot_id: int) -> str | None:
    """The hook keyword of slot `slot_id` (1-based), or None when it has none."""
    return (_nonempty(config.get(f"SLOT{slot_id}_JOB_HOOK_KEYWORD"))
            or _nonempty(config.get("STARTD_JOB_HOOK_KEYWORD")))


def starter_keywords(config: Config) -> list[str]:
    """The keywords this machine's starters run hooks of, as far as the configuration
    says: STARTER_JOB_HOOK_KEYWORD when set, else the startd's and each slot's."""
    forced = _nonempty(config.get("STARTER_JOB_HOOK_KEYWORD"))
    if forced:
        return [forced]
    found = [_nonempty(config.get("STARTD_JOB_HOOK_KEYWORD"))]
    found += [_nonempty(value) for definition, value in config.items()
              if _SLOT_KEYWORD.fullmatch(definition.name.upper())]
    return list(dict.fromkeys(word for word in found if word))


def starter_hooks(config: Config) -> list[tuple[str, str]]:
    """(keyword, hook) for each starter hook of each keyword in `starter_keywords`."""
    return [(keyword, hook) for keyword in starter_keywords(config) for hook in STARTER_HOOKS]


def starter_hook_values(config: Config) -> list[str]:
    """The value of every starter hook knob set (`<KEYWORD>_HOOK_PREPARE_JOB`, ...),
    whatever its keyword: what a starter may have to run."""
    return [value for definition, value in config.items()
            if definition.name.upper().endswith(_STARTER_HOOK_KNOBS)]


def hook_keyword_of(job_ad: Any) -> str | None:
    """The job ad's `HookKeyword`: the keyword whose fetch hook brought the job, or None."""
    value = job_ad.get("HookKeyword") if "HookKeyword" in job_ad else None
    return value if isinstance(value, str) else None


def starter_keyword(config: Config, job_hook_keyword: str | None) -> str | None:
    """`STARTER_JOB_HOOK_KEYWORD` when set, else the job ad's `HookKeyword`."""
    return _nonempty(config.get("STARTER_JOB_HOOK_KEYWORD")) or _nonempty(job_hook_keyword)


def hook_value(config: Config, keyword: str | None, hook: str) -> str | None:
    """`<KEYWORD>_HOOK_<hook>`: a program path or `python:module:function`, or None."""
    if not keyword:
        return None
    return _nonempty(config.get(f"{keyword}_HOOK_{hook}"))


def hook_args(config: Config, keyword: str | None, hook: str) -> str | None:
    """`<KEYWORD>_HOOK_<hook>_ARGS`, the extra arguments (HTCondor argument syntax)."""
    if not keyword:
        return None
    return _nonempty(config.get(f"{keyword}_HOOK_{hook}_ARGS"))


def hook_timeout_s(config: Config, keyword: str | None, hook: str) -> float:
    """`<KEYWORD>_HOOK_<hook>_TIMEOUT`, else `HOOK_TIMEOUT_<hook>` (seconds)."""
    if keyword and _nonempty(config.get(f"{keyword}_HOOK_{hook}_TIMEOUT")):
        return config.get_duration_s(f"{keyword}_HOOK_{hook}_TIMEOUT")
    return config.get_duration_s(f"HOOK_TIMEOUT_{hook}")
