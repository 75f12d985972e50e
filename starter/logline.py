"""A log formatter that makes each record's line once for every handler sharing it.

The daemons log each line to stderr and to their own file (StartLog,
StarterLog.slotN) through two handlers; with a plain `logging.Formatter` each
handler formats the time and the message again. Handlers that share one
`LineOnce` get the line it made for the first of them.
"""

from __future__ import annotations

import logging


class LineOnce(logging.Formatter):
    """`logging.Formatter`, remembering on the record the line it made."""

    def format(self, record: logging.LogRecord) -> str:
        made = record.__dict__.get("_fetchwork_line")
        if made is not None and made[0] is self:
            return str(made[1])
        line = super().format(record)
        record._fetchwork_line = (self, line)
        return line


def share(handlers: list[logging.Handler], fmt: str) -> LineOnce:
    """One `LineOnce` of `fmt` for the handlers whose formatter writes `fmt` (or
    that have none), and for any handler given it later; returned."""
    shared = LineOnce(fmt)
    for handler in handlers:
        current = handler.formatter
        if current is None or getattr(current, "_fmt", None) == fmt:
            handler.setFormatter(shared)
    return shared
