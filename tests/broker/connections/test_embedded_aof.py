"""The embedded Redis's append-only file: every write appended and fsynced each
second, and no rewrite of the whole dataset while it is small."""

from __future__ import annotations

import pytest

from fetchwork.broker.connections.embedded import EmbeddedRedis


@pytest.fixture
def server(tmp_path):
    embedded = EmbeddedRedis(tmp_path / "state")
    yield embedded
    embedded.stop()


def test_the_aof_keeps_its_durability_and_is_rewritten_only_past_two_gb(server):
    server.start()
    settings = server.client().config_get("a*")
    assert settings["appendonly"] == "yes"
    assert settings["appendfsync"] == "everysec"
    assert int(settings["auto-aof-rewrite-min-size"]) == 2 * 1024 ** 3
    assert settings["auto-aof-rewrite-percentage"] == "100"
