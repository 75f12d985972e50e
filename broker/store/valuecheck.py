"""What one job attribute's value may be: the limits the broker keeps to.

A value is refused, with an AdError naming the attribute, when a ClassAd
could not hold it or when it would burden every reader of the queue: an
integer outside 64 bits (ClassAd integers are 64-bit), lists nested deeper
than MAX_DEPTH, or more than MAX_VALUE_BYTES of text (a job ad must also
fit the fetch hook's output, HOOK_OUTPUT_LIMIT, 1 MiB by default). The walk
is iterative, so no nesting can exhaust the interpreter's stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fetchwork.errors import AdError

MAX_DEPTH = 32
MAX_VALUE_BYTES = 1024 * 1024
INT_MIN, INT_MAX = -(2 ** 63), 2 ** 63 - 1


def check_value(name: str, value: Any) -> None:
    """Raise AdError naming attribute `name` when `value` breaks a limit."""
    kind = type(value)
    if kind is float or kind is bool or (kind is str and len(value) <= MAX_VALUE_BYTES) \
            or (kind is int and INT_MIN <= value <= INT_MAX):
        return  # the common cases, kept cheap for big submissions
    size = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        if kind is str or kind is bytes:
            size += len(item)
        elif kind is int or (isinstance(item, int) and kind is not bool):
            if not INT_MIN <= item <= INT_MAX:
                raise AdError(f"attribute {name}: the integer {str(item)[:40]} is outside "
                              "the 64-bit range of a ClassAd integer")
        elif isinstance(item, list | tuple):
            if depth >= MAX_DEPTH:
                raise AdError(f"attribute {name}: lists nested more than {MAX_DEPTH} deep")
            pending.extend((member, depth + 1) for member in item)
        elif isinstance(item, Mapping):
            pending.extend((member, depth) for member in item.values())
        if size > MAX_VALUE_BYTES:
            raise AdError(f"attribute {name}: its value is over {MAX_VALUE_BYTES} bytes")
