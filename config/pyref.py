"""`python:package.module:function`: a knob value naming a callable to run in-process.

Hooks (`<KEYWORD>_HOOK_<NAME>`) and the broker's filters
(`SUBMIT_FILTER_<NAME>`, `ACTIVATION_FILTER_<NAME>`) take either a program
path or such a reference; this module is the one reader of the reference.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

PYTHON_PREFIX = "python:"


def is_python_ref(value: str) -> bool:
    """Whether a knob value names a callable rather than a program."""
    return value.startswith(PYTHON_PREFIX)


def module_of(value: str) -> str:
    """The module part of `python:package.module:function`."""
    return value[len(PYTHON_PREFIX):].partition(":")[0]


def load_callable(value: str) -> Callable[..., Any]:
    """The callable named by `python:package.module:function` (ImportError, ValueError,
    AttributeError when it does not exist)."""
    module_name, colon, function_name = value[len(PYTHON_PREFIX):].partition(":")
    if not colon or not module_name or not function_name:
        raise ValueError(f"{value!r} is not python:package.module:function")
    target: Any = importlib.import_module(module_name)
    for part in function_name.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{value!r} does not name a callable")
    return target
