"""Config.load: the packaged defaults, the config file, and environment overrides."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fetchwork.config import keywords
from fetchwork.config.loader import DEFAULTS_FILE, Config, environ_without_config
from fetchwork.errors import ConfigError, UndefinedKnobError


@pytest.fixture
def conf(tmp_path):
    def write(text: str, name: str = "fetchwork.conf") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return write


def load(path: str | None = None, **env: str) -> Config:
    environ = {"HOME": "/home/someone", **env}
    if path is not None:
        environ["FETCHWORK_CONFIG"] = path
    return Config.load(environ=environ)


def test_reference_defaults_hold_without_a_config_file():
    config = load()
    assert config.get_int("STARTER_INITIAL_UPDATE_INTERVAL") == 8
    assert config.get_int("STARTER_UPDATE_INTERVAL") == 300
    assert config.get_expr("FetchWorkDelay").eval() == 300
    assert config.get_duration_s("HOOK_TIMEOUT_JOB_EXIT") == 30
    assert config.get_int("MachineMaxVacateTime") == 600


def test_every_default_has_a_comment_above_it():
    lines = Path(DEFAULTS_FILE).read_text().split("\n")
    for index, line in enumerate(lines):
        if line.strip() and not line.startswith("#"):
            above = index - 1
            while above >= 0 and lines[above].strip() and not lines[above].startswith("#"):
                above -= 1
            assert above >= 0 and lines[above].startswith("#"), f"no comment above {line!r}"


def test_the_config_file_overrides_defaults(conf):
    config = load(conf("STARTER_UPDATE_INTERVAL = 60\n"))
    assert config.get_int("STARTER_UPDATE_INTERVAL") == 60
    where = config.where("starter_update_interval")
    assert where is not None and where.source.endswith("fetchwork.conf") and where.line == 1


def test_environment_overrides_win(conf):
    config = load(conf("A = one\nB = $(A)-two\n"), _FETCHWORK_A="zero")
    assert config.get("B") == "zero-two"
    assert config.where("A").source == "<environment> _FETCHWORK_A"


def test_fetchwork_prefixed_environment_sets_those_knobs():
    config = load(FETCHWORK_BROKER="redis://example:6379/0")
    assert config.get("FETCHWORK_BROKER") == "redis://example:6379/0"


def test_state_dir_defaults_under_home():
    assert load().get("FETCHWORK_STATE_DIR") == "/home/someone/.local/state/fetchwork"
    assert load(XDG_STATE_HOME="/xdg").get("FETCHWORK_STATE_DIR") == "/xdg/fetchwork"


def test_a_missing_config_file_is_an_error_that_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="FETCHWORK_CONFIG"):
        load(str(tmp_path / "nope.conf"))


def test_errors_in_the_config_file_name_file_and_line(conf):
    path = conf("A = 1\nB 2\n")
    with pytest.raises(ConfigError, match=rf"{path}:2:"):
        load(path)


def test_includes_are_relative_to_the_including_file(conf, tmp_path):
    conf("EXTRA = yes\n", "extra.conf")
    config = load(conf("include : extra.conf\n"))
    assert config.get("EXTRA") == "yes"


def test_typed_errors_carry_source_and_line(conf):
    config = load(conf("\nNUM_SLOTS = many\n"))
    with pytest.raises(ConfigError, match=r"fetchwork.conf:2: NUM_SLOTS: expected an integer"):
        config.get_int("NUM_SLOTS")


def test_typed_lookup_of_an_undefined_knob_without_default_raises():
    with pytest.raises(UndefinedKnobError):
        load().get_int("NOT_A_KNOB")
    assert load().get_int("NOT_A_KNOB", 7) == 7


def test_detected_facts_are_macros():
    config = load()
    assert config.get_int("DETECTED_CPUS") == os.cpu_count()
    assert config.get_int("NUM_SLOTS") == os.cpu_count()
    assert config.get("OPSYS") == "LINUX"


def test_slot_keyword_falls_back_to_the_startd_keyword(conf):
    config = load(conf("STARTD_JOB_HOOK_KEYWORD = DATABASE\nSLOT4_JOB_HOOK_KEYWORD = WEB\n"))
    assert keywords.slot_keyword(config, 1) == "DATABASE"
    assert keywords.slot_keyword(config, 4) == "WEB"


def test_no_keyword_means_no_hooks():
    config = load()
    assert keywords.slot_keyword(config, 1) is None
    assert keywords.hook_value(config, None, keywords.FETCH_WORK) is None


def test_hook_knobs_follow_the_keyword(conf):
    config = load(conf(
        "DATABASE_HOOK_DIR = /usr/local/fetch/database\n"
        "DATABASE_HOOK_FETCH_WORK = $(DATABASE_HOOK_DIR)/fetch_work.php\n"
        "DATABASE_HOOK_FETCH_WORK_ARGS = -v --pool main\n"
        "DATABASE_HOOK_FETCH_WORK_TIMEOUT = 2m\n"))
    assert keywords.hook_value(config, "DATABASE", keywords.FETCH_WORK) == \
        "/usr/local/fetch/database/fetch_work.php"
    assert keywords.hook_args(config, "DATABASE", keywords.FETCH_WORK) == "-v --pool main"
    assert keywords.hook_timeout_s(config, "DATABASE", keywords.FETCH_WORK) == 120
    assert keywords.hook_timeout_s(config, "DATABASE", keywords.JOB_EXIT) == 30
    assert keywords.hook_value(config, "DATABASE", keywords.REPLY_FETCH) is None


def test_starter_keyword_is_forced_by_config(conf):
    assert keywords.starter_keyword(load(), "WEB") == "WEB"
    forced = load(conf("STARTER_JOB_HOOK_KEYWORD = LOCAL\n"))
    assert keywords.starter_keyword(forced, "WEB") == "LOCAL"


def test_the_starters_keywords_are_the_startds_and_the_slots_unless_forced(conf):
    assert keywords.starter_keywords(load()) == []
    config = load(conf("STARTD_JOB_HOOK_KEYWORD = DATABASE\nSLOT4_JOB_HOOK_KEYWORD = WEB\n"
                       "SLOT5_JOB_HOOK_KEYWORD = DATABASE\nSLOT_JOB_HOOK_KEYWORD = NOT_A_SLOT\n"))
    assert keywords.starter_keywords(config) == ["DATABASE", "WEB"]
    forced = load(conf("STARTD_JOB_HOOK_KEYWORD = DATABASE\nSTARTER_JOB_HOOK_KEYWORD = LOCAL\n"))
    assert keywords.starter_keywords(forced) == ["LOCAL"]


def test_the_starters_hooks_are_each_hook_of_each_of_their_keywords(conf):
    assert keywords.starter_hooks(load()) == []
    config = load(conf("STARTD_JOB_HOOK_KEYWORD = DATABASE\nSLOT2_JOB_HOOK_KEYWORD = WEB\n"))
    assert keywords.starter_hooks(config) == [
        ("DATABASE", "PREPARE_JOB"), ("DATABASE", "UPDATE_JOB_INFO"), ("DATABASE", "JOB_EXIT"),
        ("WEB", "PREPARE_JOB"), ("WEB", "UPDATE_JOB_INFO"), ("WEB", "JOB_EXIT")]


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = environ_without_config()
    full_env.update(env)
    return subprocess.run([sys.executable, "-m", "fetchwork.cli", *args], env=full_env,
                          capture_output=True, text=True, timeout=60)


def test_cli_prints_expanded_values_case_insensitively(conf):
    path = conf("A = one\nB = $(A)-two\nC = joined \\\n   line\n")
    result = run_cli("config", "B", "b", "C", env={"FETCHWORK_CONFIG": path})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["one-two", "one-two", "joined line"]


def test_cli_sees_environment_overrides(conf):
    path = conf("A = one\nB = $(A)-two\n")
    result = run_cli("config", "B", env={"FETCHWORK_CONFIG": path, "_FETCHWORK_A": "zero"})
    assert result.stdout.strip() == "zero-two"


def test_cli_undefined_name_exits_non_zero_with_a_message():
    result = run_cli("config", "NO_SUCH_KNOB", env={})
    assert result.returncode == 1
    assert "NO_SUCH_KNOB is not defined" in result.stderr


def test_cli_reference_intervals_without_a_config_file():
    result = run_cli("config", "STARTER_INITIAL_UPDATE_INTERVAL", "STARTER_UPDATE_INTERVAL",
                     env={})
    assert result.stdout.split() == ["8", "300"]


def test_cli_dump_names_file_and_line(conf):
    path = conf("\n\nMY_KNOB = $(OPSYS)-x\n")
    result = run_cli("config", "--dump", env={"FETCHWORK_CONFIG": path})
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    at = lines.index("MY_KNOB = LINUX-x")
    assert lines[at + 1] == f" # at: {path}, line 3"
    assert lines[at + 2] == " # raw: MY_KNOB = $(OPSYS)-x"
    assert any(line.startswith("STARTER_UPDATE_INTERVAL = 300") for line in lines)


def test_cli_bad_config_file_is_one_clear_line(conf):
    path = conf("A = 1\nnonsense\n")
    result = run_cli("config", "A", env={"FETCHWORK_CONFIG": path})
    assert result.returncode == 1
    assert f"{path}:2:" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_pool_file_in_the_state_dir_is_read_after_defaults(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "pool.conf").write_text("STARTD_JOB_HOOK_KEYWORD = FETCHWORK\nNUM_SLOTS = 3\n")
    admin = tmp_path / "admin.conf"
    admin.write_text("NUM_SLOTS = 5\n")
    env = {"FETCHWORK_STATE_DIR": str(state), "FETCHWORK_CONFIG": str(admin)}
    config = Config.load(environ=env)
    assert config.get("STARTD_JOB_HOOK_KEYWORD") == "FETCHWORK"
    assert config.where("STARTD_JOB_HOOK_KEYWORD").source == str(state / "pool.conf")
    assert config.get("NUM_SLOTS") == "5"  # the admin's file still wins


def test_no_pool_file_leaves_the_defaults(tmp_path):
    config = Config.load(environ={"FETCHWORK_STATE_DIR": str(tmp_path)})
    assert config.get("STARTD_JOB_HOOK_KEYWORD") == ""


def test_cli_config_file_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.conf"
    path.write_bytes(b"A = 1\nB = 2\n# caf\xe9\nC = 3\n")
    result = run_cli("config", "A", env={"FETCHWORK_CONFIG": str(path)})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{path}:3:" in result.stderr and "not UTF-8" in result.stderr


def test_an_included_file_that_is_not_utf8_is_named(conf, tmp_path):
    (tmp_path / "extra.conf").write_bytes(b"\xff = 1\n")
    path = conf("A = 1\ninclude : extra.conf\n")
    with pytest.raises(ConfigError, match=r"extra\.conf:1: byte 0xff is not UTF-8"):
        Config.load(environ={"FETCHWORK_CONFIG": path})
