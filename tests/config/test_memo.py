"""A configuration load is remembered, and read again when a file it depended on changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fetchwork.config import memo
from fetchwork.config.loader import Config


@pytest.fixture(autouse=True)
def fresh_memo():
    memo.forget()
    yield
    memo.forget()


def load(path: Path, **env: str) -> Config:
    return Config.load(environ={"HOME": "/home/someone", "FETCHWORK_CONFIG": str(path), **env})


def rewrite(path: Path, text: str) -> None:
    """Write `text`, and move the modification time on even where the clock is coarse."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def test_an_unchanged_configuration_is_not_parsed_again(tmp_path, monkeypatch):
    conf = tmp_path / "fetchwork.conf"
    conf.write_text("NUM_SLOTS = 3\n")
    assert load(conf).get_int("NUM_SLOTS") == 3
    parsed = []
    import fetchwork.config.loader as loader

    real = loader.parse
    monkeypatch.setattr(loader, "parse", lambda *a, **k: parsed.append(a[1]) or real(*a, **k))
    assert load(conf).get_int("NUM_SLOTS") == 3
    assert parsed == []


def test_an_edited_file_is_read_again(tmp_path):
    conf = tmp_path / "fetchwork.conf"
    conf.write_text("NUM_SLOTS = 3\n")
    assert load(conf).get_int("NUM_SLOTS") == 3
    rewrite(conf, "NUM_SLOTS = 5\n")
    assert load(conf).get_int("NUM_SLOTS") == 5


def test_an_edited_included_file_is_read_again(tmp_path):
    extra = tmp_path / "extra.conf"
    extra.write_text("NUM_SLOTS = 2\n")
    conf = tmp_path / "fetchwork.conf"
    conf.write_text(f"include : {extra}\n")
    assert load(conf).get_int("NUM_SLOTS") == 2
    rewrite(extra, "NUM_SLOTS = 7\n")
    assert load(conf).get_int("NUM_SLOTS") == 7


def test_an_optional_file_that_appears_is_read(tmp_path):
    optional = tmp_path / "later.conf"
    conf = tmp_path / "fetchwork.conf"
    conf.write_text(f"NUM_SLOTS = 1\ninclude ifexist : {optional}\n")
    assert load(conf).get_int("NUM_SLOTS") == 1
    optional.write_text("NUM_SLOTS = 4\n")
    assert load(conf).get_int("NUM_SLOTS") == 4


def test_the_environment_is_part_of_what_is_remembered(tmp_path):
    conf = tmp_path / "fetchwork.conf"
    conf.write_text("NUM_SLOTS = 3\n")
    assert load(conf).get_int("NUM_SLOTS") == 3
    assert load(conf, _FETCHWORK_NUM_SLOTS="6").get_int("NUM_SLOTS") == 6
    assert load(conf).get_int("NUM_SLOTS") == 3
