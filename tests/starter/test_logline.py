"""One log line made for every handler that shares a `LineOnce` formatter."""

from __future__ import annotations

import io
import logging

from fetchwork.starter.logline import LineOnce, share

FORMAT = "%(levelname)s %(name)s: %(message)s"


def test_handlers_sharing_the_formatter_write_the_line_made_for_the_first():
    first, second = io.StringIO(), io.StringIO()
    handlers: list[logging.Handler] = [logging.StreamHandler(first),
                                       logging.StreamHandler(second)]
    handlers[0].setFormatter(logging.Formatter(FORMAT))
    shared = share(handlers, FORMAT)
    assert all(handler.formatter is shared for handler in handlers)
    record = logging.LogRecord("fw.test", logging.INFO, __file__, 1, "job %s ended", ("1.0",),
                               None)
    handlers[0].handle(record)
    record.msg, record.args = "changed after the first handler", ()  # not made again
    handlers[1].handle(record)
    assert first.getvalue() == second.getvalue() == "INFO fw.test: job 1.0 ended\n"
    other = LineOnce(FORMAT)  # another formatter makes its own line
    assert other.format(record) == "INFO fw.test: changed after the first handler"


def test_a_handler_with_another_format_keeps_it():
    handler = logging.StreamHandler(io.StringIO())
    own = logging.Formatter("%(message)s")
    handler.setFormatter(own)
    share([handler], FORMAT)
    assert handler.formatter is own
