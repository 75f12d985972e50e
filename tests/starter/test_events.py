"""The starter's events: a held event goes out with the next one, in one write."""

from __future__ import annotations

import io
import json

from fetchwork.starter.events import Events


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_held_events_go_out_with_the_next_one_in_order() -> None:
    stream = CountingStream()
    events = Events(stream)
    events.emit("prepared", held=True)
    events.emit("started", held=True, pid=42)
    assert stream.getvalue() == "" and stream.writes == 0
    events.emit("state", state="Running")
    assert stream.writes == 1
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines == [{"event": "prepared"}, {"event": "started", "pid": 42},
                     {"event": "state", "state": "Running"}]


def test_an_event_not_held_is_written_at_once() -> None:
    stream = CountingStream()
    events = Events(stream)
    events.emit("exited", how="exit", ad={"ExitCode": 0})
    assert stream.writes == 1
    assert json.loads(stream.getvalue()) == {"event": "exited", "how": "exit",
                                             "ad": {"ExitCode": 0}}
