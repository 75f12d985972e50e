"""A job description as htcondor2's `Schedd.submit` takes it, turned into the submit
text `fetchwork submit` reads (submit/submitfile.py does the rest).

`description` is an `htcondor2.Submit`, a dict of submit commands, or submit
text. As htcondor2 does, its commands are written out one per line, followed
by one queue statement: the description's own, with `count` (when not 0) in
place of its count; `queue` in its place; or, with `itemdata`, `queue [count]
<names> from (...)` over the items, whose fields are split by the ASCII unit
separator so that values may hold commas and spaces. Text given with none of
`count`, `itemdata` and `queue` goes through as written, every queue
statement included, exactly as the command line reads a submit file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import htcondor2

from fetchwork.errors import SubmitFileError
from fetchwork.submit.submitfile import split_qargs

# htcondor2's field separator inside generated item lines.
UNIT_SEPARATOR = "\x1f"
_QUEUE_LINE_RE = re.compile(r"^[ \t]*queue\b", re.I | re.M)


class NoItemData:
    """The default of `itemdata`: the description's own queue statement applies."""

    def __repr__(self) -> str:
        return "DEFAULT_ITEMDATA"


DEFAULT_ITEMDATA: Any = NoItemData()

Description: TypeAlias = htcondor2.Submit | Mapping[str, Any] | str
ItemData: TypeAlias = Iterable[str] | Iterable[Mapping[str, Any]] | None


def submit_text(description: Description, count: int = 0,
                itemdata: ItemData = DEFAULT_ITEMDATA, queue: str | None = None) -> str:
    """The submit text of `description` with its queue statement (see the module text)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise SubmitFileError(f"count must be a whole number >= 0, not {count!r}")
    overridden = count != 0 or itemdata is not DEFAULT_ITEMDATA or queue is not None
    if queue is not None and (count != 0 or itemdata is not DEFAULT_ITEMDATA):
        raise SubmitFileError("queue and count/itemdata are mutually exclusive")
    if isinstance(description, str) and not overridden and _QUEUE_LINE_RE.search(description):
        return description if description.endswith("\n") else description + "\n"
    submit = _as_submit(description)
    lines = [f"{key} = {value}" for key, value in submit.items()]
    if queue is not None:
        statement = queue.strip()
        if not statement.lower().startswith("queue"):
            statement = f"queue {statement}"
        return "\n".join([*lines, statement]) + "\n"
    if itemdata is DEFAULT_ITEMDATA:
        return "\n".join([*lines, *_own_queue(submit, count)]) + "\n"
    if itemdata is None:
        return "\n".join([*lines, f"queue {count or ''}".rstrip()]) + "\n"
    return "\n".join([*lines, *_items_queue(itemdata, count)]) + "\n"


def _as_submit(description: Description) -> htcondor2.Submit:
    if isinstance(description, htcondor2.Submit):
        return description
    if isinstance(description, Mapping):
        bad = [key for key in description if not isinstance(key, str)]
        if bad:
            raise SubmitFileError(f"submit command names must be strings, not {bad[0]!r}")
        return htcondor2.Submit({key: str(value) for key, value in description.items()})
    if isinstance(description, str):
        try:
            return htcondor2.Submit(description)
        except Exception as exc:  # the library raises ValueError/RuntimeError
            raise SubmitFileError(f"cannot parse the submit description: {exc}") from exc
    raise TypeError("description must be an htcondor2.Submit, a dict of submit commands "
                    f"or submit text, not {type(description).__name__}")


def _own_queue(submit: htcondor2.Submit, count: int) -> list[str]:
    """The description's queue statement, its count replaced by `count` (when not 0),
    with its inline items written out again."""
    qargs = submit.getQArgs().strip()
    if count:
        _old_count, names, items = split_qargs(qargs)
        qargs = " ".join(part for part in (str(count), names, items.strip()) if part)
    if not qargs.endswith("("):
        return [f"queue {qargs}".rstrip()]
    rows = submit.itemdata()
    lines = [f"queue {qargs}"]
    for row in rows or ():
        lines.append(UNIT_SEPARATOR.join(str(value) for value in dict(row).values()))
    return [*lines, ")"]


def _items_queue(itemdata: Iterable[Any], count: int) -> list[str]:
    """`queue [count] <names> from (...)` over `itemdata`: strings (one item each, the
    variable `item`) or mappings (the first one's keys name the variables)."""
    items = iter(itemdata)
    try:
        first = next(items)
    except StopIteration:
        return [f"queue {count or ''}".rstrip() + " item from (", ")"]
    head = f"{count} " if count else ""
    if isinstance(first, str):
        names: list[str] | None = None
        lines = [f"queue {head}item from ("]
    elif isinstance(first, Mapping):
        names = list(first)
        if any(not isinstance(name, str) for name in names):
            raise SubmitFileError("itemdata dictionaries must have string keys")
        lines = [f"queue {head}{','.join(names)} from ("]
    else:
        raise TypeError("itemdata must be an iterator of strings or of dictionaries")
    for item in (first, *items):
        lines.append(_item_line(item, names))
    return [*lines, ")"]


def _item_line(item: Any, names: list[str] | None) -> str:
    if names is None:
        if not isinstance(item, str):
            raise TypeError("itemdata mixes strings with other items")
        values = [item.strip()]
    else:
        if not isinstance(item, Mapping):
            raise TypeError("itemdata mixes dictionaries with other items")
        values = [str(item.get(name, "")).strip() for name in names]
    for value in values:
        if "\n" in value or UNIT_SEPARATOR in value:
            raise SubmitFileError(f"an item may not contain a newline or \\x1f: {value!r}")
    return UNIT_SEPARATOR.join(values)
