"""fetchwork: a pull-based distributed worker system.

The component subpackages (`fetchwork.config`, `fetchwork.hooks`,
`fetchwork.broker`, `fetchwork.starter`, `fetchwork.startd`) live in the
repository's top-level folders of the same names.

`fetchwork.Schedd` is the Python API with htcondor2's `Schedd` methods
(fetchwork/schedd.py, docs/python-api.md). It is imported on first use, so
`import fetchwork` stays cheap for the daemons and hooks that import the
package for its version only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fetchwork.schedd import Schedd, SubmitResult

# The one place the version is written; pyproject.toml reads it from here.
# (Asking importlib.metadata costs ~100 ms on every starter start.)
__version__ = "0.1.0"

__all__ = ["Schedd", "SubmitResult", "__version__"]

# Names imported from their modules on first use (PEP 562).
_LAZY = {"Schedd": "fetchwork.schedd", "SubmitResult": "fetchwork.schedd"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fetchwork' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
