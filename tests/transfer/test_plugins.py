"""File-transfer plugins with HTCondor's protocol: the registry of schemes, and
real plugin programs (written here) run for batches of files: downloads,
uploads, a failure with its exit code, plugins that lie or break the protocol.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import sys
import textwrap
from pathlib import Path

import pytest

from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError
from fetchwork.transfer.plugins import (
    Direction,
    FileTransfer,
    Plugin,
    PluginError,
    PluginRegistry,
    check_local_name,
    parse_ads,
    parse_job_plugins,
    plugin_lifetime_s,
    query_plugin,
    read_results,
    resolve_plugin_path,
    run_plugin,
    scheme_of,
)

# A plugin in the style of HTCondor's example plugin: `copy:///path` URLs are files
# copied to or from the job's folder. It records how it was run in $RECORD.
COPY_PLUGIN = """\
import os, shutil, sys, time, json
import classad2
record = os.environ.get("RECORD")
if record:
    with open(record, "a") as handle:
        handle.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "uid": os.getuid(),
                                 "umask": os.umask(0), "env": sorted(os.environ)}) + "\\n")
if sys.argv[1:] == ["-classad"]:
    sys.stdout.write(classad2.ClassAd({"MultipleFileSupport": True, "PluginType": "FileTransfer",
                                       "SupportedMethods": METHODS, "Version": "1.2"}).printOld())
    sys.exit(0)
upload = "-upload" in sys.argv
infile = sys.argv[sys.argv.index("-infile") + 1]
outfile = sys.argv[sys.argv.index("-outfile") + 1]
ads = classad2.parseAds(open(infile).read())
code = 0
with open(outfile, "w") as out:
    for ad in ads:
        url, local = ad["Url"], ad["LocalFileName"]
        path = url.split("://", 1)[1]
        start = time.time()
        try:
            if upload:
                shutil.copy(local, path)
            else:
                shutil.copy(path, local)
            size = os.stat(local).st_size
            result = {"TransferSuccess": True, "TransferProtocol": "copy",
                      "TransferType": "upload" if upload else "download",
                      "TransferFileName": local, "TransferUrl": url,
                      "TransferTotalBytes": size, "TransferStartTime": int(start),
                      "TransferEndTime": int(time.time())}
        except OSError as exc:
            result = {"TransferSuccess": False, "TransferUrl": url, "TransferFileName": local,
                      "TransferError": f"{type(exc).__name__}: {exc.strerror}"}
            code = 1
        out.write(str(classad2.ClassAd(result)))
sys.exit(code)
"""

# Fails every file with its own reason and exit code 7.
FAILING_PLUGIN = """\
import sys, classad2
if sys.argv[1:] == ["-classad"]:
    print('SupportedMethods = "quota"\\nMultipleFileSupport = true\\nPluginVersion = "0"')
    sys.exit(0)
infile = sys.argv[sys.argv.index("-infile") + 1]
outfile = sys.argv[sys.argv.index("-outfile") + 1]
with open(outfile, "w") as out:
    for ad in classad2.parseAds(open(infile).read()):
        out.write(str(classad2.ClassAd({"TransferSuccess": False, "TransferUrl": ad["Url"],
                                        "TransferFileName": ad["LocalFileName"],
                                        "TransferError": "quota exceeded on the server"})))
sys.stderr.write("giving up\\n")
sys.exit(7)
"""

# Says every download worked, exits 0, and writes no file at all.
LYING_PLUGIN = """\
import sys, classad2
infile = sys.argv[sys.argv.index("-infile") + 1]
outfile = sys.argv[sys.argv.index("-outfile") + 1]
with open(outfile, "w") as out:
    for ad in classad2.parseAds(open(infile).read()):
        out.write(str(classad2.ClassAd({"TransferSuccess": True, "TransferUrl": ad["Url"],
                                        "TransferFileName": ad["LocalFileName"],
                                        "TransferTotalBytes": 1000})))
"""

# Answers for a file it was never given.
STRANGER_PLUGIN = """\
import sys, classad2
outfile = sys.argv[sys.argv.index("-outfile") + 1]
with open(outfile, "w") as out:
    out.write(str(classad2.ClassAd({"TransferSuccess": True, "TransferUrl": "copy:///etc/shadow",
                                    "TransferFileName": "/etc/shadow"})))
"""


def write_plugin(folder: Path, name: str, body: str, methods: str = "copy") -> Path:
    path = folder / name
    path.write_text(f"#!{sys.executable}\nMETHODS = {methods!r}\n{body}")
    path.chmod(0o755)
    return path


def write_shell_plugin(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def plugin_env(record: Path | None = None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if record is not None:
        env["RECORD"] = str(record)
    return env


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    folder = tmp_path / "sources"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    (folder / "b.bin").write_bytes(bytes(range(256)) * 100)
    return folder


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    folder = tmp_path / "sandbox"
    folder.mkdir()
    return folder


# -- asking a plugin what it serves ------------------------------------------------------


def test_a_plugin_says_which_schemes_it_serves(tmp_path):
    path = write_plugin(tmp_path, "copy_plugin", COPY_PLUGIN, "copy, Mirror")
    plugin = query_plugin(path, plugin_env())
    assert plugin.methods == ("copy", "mirror")
    assert plugin.version == "1.2"
    assert plugin.path == path


def test_a_missing_plugin_is_named(tmp_path):
    with pytest.raises(PluginError, match=f"{tmp_path}/nowhere does not exist"):
        query_plugin(tmp_path / "nowhere")


def test_a_plugin_that_is_not_executable_is_named(tmp_path):
    path = tmp_path / "plain"
    path.write_text("#!/bin/sh\n")
    with pytest.raises(PluginError, match="is not executable"):
        query_plugin(path)


def test_a_plugin_without_methods_or_multi_file_support_is_refused(tmp_path):
    silent = write_shell_plugin(tmp_path, "silent", "exit 0\n")
    with pytest.raises(PluginError, match="no SupportedMethods"):
        query_plugin(silent)
    single = write_shell_plugin(tmp_path, "single", """\
        echo 'SupportedMethods = "old"'
        echo 'MultipleFileSupport = false'
    """)
    with pytest.raises(PluginError, match="one-file-per-run"):
        query_plugin(single)


def test_a_plugin_whose_query_fails_says_what_it_said(tmp_path):
    broken = write_shell_plugin(tmp_path, "broken", "echo 'no licence' >&2; exit 3\n")
    with pytest.raises(PluginError, match="exited with code 3; it said: no licence"):
        query_plugin(broken)


# -- the registry --------------------------------------------------------------------------


def test_the_later_machine_plugin_wins_a_scheme_and_a_broken_one_is_reported(tmp_path, caplog):
    first = write_plugin(tmp_path, "first", COPY_PLUGIN, "copy,web")
    second = write_plugin(tmp_path, "second", COPY_PLUGIN, "web")
    registry = PluginRegistry.query([str(first), str(tmp_path / "gone"), str(second)],
                                    plugin_env())
    assert registry.plugin_for("web://host/x").path == second
    assert registry.plugin_for("COPY:///x").path == first
    assert "gone does not exist" in caplog.text
    with pytest.raises(PluginError) as caught:
        registry.plugin_for("s3://bucket/key")
    message = str(caught.value)
    assert "no transfer plugin serves s3://" in message
    assert "served here: copy, web" in message and "gone does not exist" in message


def test_a_jobs_own_plugin_wins_for_its_methods(tmp_path):
    machine = write_plugin(tmp_path, "machine", COPY_PLUGIN, "copy,web")
    registry = PluginRegistry.query([str(machine)], plugin_env())
    sandbox = tmp_path / "sandbox"
    with_job = registry.with_job("web, WEBS = /home/me/my_plugin.py ; s3=s3.sh", sandbox)
    mine = with_job.plugin_for("web://x")
    assert mine.path == sandbox / "my_plugin.py" and mine.from_job
    assert with_job.plugin_for("webs://x").path == sandbox / "my_plugin.py"
    assert with_job.plugin_for("s3://b/k").path == sandbox / "s3.sh"
    assert with_job.plugin_for("copy:///x").path == machine
    assert registry.plugin_for("web://x").path == machine  # the machine's is unchanged


@pytest.mark.parametrize("text", ["just_a_path.py", "=plugin.py", "web="])
def test_a_bad_transfer_plugins_entry_is_named(text):
    with pytest.raises(PluginError, match="is not 'methods=path'"):
        parse_job_plugins(text)


def test_a_name_that_is_no_url_has_no_plugin():
    with pytest.raises(PluginError, match="not a URL"):
        PluginRegistry.from_plugins([]).plugin_for("data.txt")
    assert scheme_of("HTTPS://x") == "https"
    assert scheme_of("file.txt") == ""


def test_the_default_plugin_is_fetchworks_own_http_plugin(tmp_path):
    config = Config.load(environ={"FETCHWORK_STATE_DIR": str(tmp_path), "HOME": str(tmp_path)},
                         config_file=os.devnull)
    assert config.get_list("FILETRANSFER_PLUGINS") == ["fetchwork-http-plugin"]
    path = resolve_plugin_path("fetchwork-http-plugin")
    assert path.is_absolute() and path.is_file()
    registry = PluginRegistry.from_config(config)
    assert registry.plugin_for("https://example.org/x").path == path
    assert registry.plugin_for("http://example.org/x").methods == ("http", "https")
    assert plugin_lifetime_s(config) == 72000


def test_url_transfers_can_be_turned_off():
    config = Config.from_text("ENABLE_URL_TRANSFERS = false\nFILETRANSFER_PLUGINS = x\n")
    with pytest.raises(PluginError, match="ENABLE_URL_TRANSFERS = false"):
        PluginRegistry.from_config(config).plugin_for("http://x/y")


def test_a_plugin_lifetime_of_zero_is_refused():
    with pytest.raises(ConfigError, match="MAX_FILE_TRANSFER_PLUGIN_LIFETIME must be above 0"):
        plugin_lifetime_s(Config.from_text("MAX_FILE_TRANSFER_PLUGIN_LIFETIME = 0\n"))


# -- running a plugin ----------------------------------------------------------------------


def copy_plugin(tmp_path: Path) -> Plugin:
    return query_plugin(write_plugin(tmp_path, "copy_plugin", COPY_PLUGIN), plugin_env())


def test_a_download_fills_the_folder_and_reports_each_file(tmp_path, sources, sandbox):
    record = tmp_path / "record.jsonl"
    plugin = copy_plugin(tmp_path)
    files = [FileTransfer(f"copy://{sources}/a.txt", "a.txt"),
             FileTransfer(f"copy://{sources}/b.bin", "b.bin")]
    run = run_plugin(plugin, files, folder=sandbox, env=plugin_env(record), timeout_s=60,
                     preexec_fn=lambda: os.umask(0o027))
    assert run.ok, run.failure()
    assert run.exit_code == 0 and run.direction is Direction.DOWNLOAD
    assert (sandbox / "a.txt").read_text() == "alpha\n"
    assert (sandbox / "b.bin").read_bytes() == (sources / "b.bin").read_bytes()
    first, second = run.results
    assert (first.url, first.local_name, first.success) == (files[0].url, "a.txt", True)
    assert second.total_bytes == 25600 and second.protocol == "copy"
    assert second.transfer_type == "download"
    assert second.start_time is not None and second.end_time is not None
    assert second.ad["TransferTotalBytes"] == 25600
    seen = records(record)[-1]
    assert seen["cwd"] == str(sandbox)
    assert seen["argv"][0] == "-infile" and seen["argv"][2] == "-outfile"
    assert "-upload" not in seen["argv"]
    assert seen["umask"] == 0o027  # the caller's preexec_fn ran in the plugin's process
    # The environment given, nothing else (Python itself may add LC_CTYPE).
    assert set(seen["env"]) - {"LC_CTYPE"} == {"PATH", "RECORD"}
    assert sorted(path.name for path in sandbox.iterdir()) == ["a.txt", "b.bin"]


def test_an_upload_reads_the_folder(tmp_path, sandbox):
    record = tmp_path / "record.jsonl"
    (sandbox / "result.dat").write_text("42\n")
    target = tmp_path / "store"
    target.mkdir()
    run = run_plugin(copy_plugin(tmp_path),
                     [FileTransfer(f"copy://{target}/result.dat", "result.dat")],
                     folder=sandbox, direction=Direction.UPLOAD, env=plugin_env(record),
                     timeout_s=60)
    assert run.ok, run.failure()
    assert (target / "result.dat").read_text() == "42\n"
    assert run.results[0].transfer_type == "upload"
    assert records(record)[-1]["argv"][-1] == "-upload"


def test_a_failing_plugin_reports_its_exit_code_and_reason(tmp_path, sandbox):
    path = write_plugin(tmp_path, "quota_plugin", FAILING_PLUGIN)
    plugin = query_plugin(path, plugin_env())
    files = [FileTransfer("quota://server/x", "x"), FileTransfer("quota://server/y", "y")]
    run = run_plugin(plugin, files, folder=sandbox, env=plugin_env(), timeout_s=60)
    assert not run.ok
    assert run.exit_code == 7  # the held job's HoldReasonSubCode
    assert [result.success for result in run.results] == [False, False]
    assert run.results[0].error == "quota exceeded on the server"
    assert run.failure() == (f"download plugin {path} exited with code 7: quota://server/x (x): "
                             "quota exceeded on the server")
    assert "giving up" in run.output_tail


def test_a_plugin_that_claims_a_download_it_did_not_make_fails_that_file(tmp_path, sandbox):
    plugin = Plugin(write_plugin(tmp_path, "liar", LYING_PLUGIN), ("copy",))
    run = run_plugin(plugin, [FileTransfer("copy:///nowhere", "out.dat")], folder=sandbox,
                     env=plugin_env(), timeout_s=60)
    assert run.exit_code == 0 and not run.ok
    assert "reported success but out.dat is not a regular file" in run.results[0].error


def test_a_plugin_that_answers_for_a_file_it_was_not_given_is_refused(tmp_path, sandbox):
    plugin = Plugin(write_plugin(tmp_path, "stranger", STRANGER_PLUGIN), ("copy",))
    with pytest.raises(PluginError, match="answered for a file it was not given") as caught:
        run_plugin(plugin, [FileTransfer("copy:///x", "x")], folder=sandbox, env=plugin_env(),
                   timeout_s=60)
    assert caught.value.exit_code == 0


def test_a_file_the_plugin_is_silent_about_failed(tmp_path, sandbox, sources):
    files = [FileTransfer(f"copy://{sources}/a.txt", "a.txt"), FileTransfer("copy:///b", "b")]
    answer = (f'[TransferSuccess = true; TransferUrl = "copy://{sources}/a.txt"; '
              f'TransferFileName = "{sandbox}/a.txt"]').encode()
    (sandbox / "a.txt").write_text("x")
    results = read_results(answer, files, sandbox, Direction.DOWNLOAD,
                           Plugin(Path("/p"), ("copy",)), exit_code=1)
    assert [result.success for result in results] == [True, False]
    assert results[1].error == "the plugin reported nothing for this file"


@pytest.mark.parametrize(("script", "message"), [
    ("exit 0\n", "exited with code 0 and wrote no answer"),
    ('printf "%s" "<html>500 oops</html>" > "$4"; exit 1\n', "is not ClassAds"),
    ('printf "%s" "[TransferSuccess = true; TransferUrl = " > "$4"\n', "is not ClassAds"),
    ("echo 'segfaulting' >&2; kill -SEGV $$\n",
     re.escape("killed by signal 11 (SIGSEGV); it said: segfaulting")),
])
def test_a_plugin_that_breaks_the_protocol_is_named(tmp_path, sandbox, script, message):
    path = write_shell_plugin(tmp_path, "bad_plugin", script)
    with pytest.raises(PluginError, match=message) as caught:
        run_plugin(Plugin(path, ("copy",)), [FileTransfer("copy:///x", "x")], folder=sandbox,
                   env=plugin_env(), timeout_s=60)
    assert str(path) in str(caught.value)
    assert not list(sandbox.iterdir())  # its input and output files are gone


def test_a_plugin_that_runs_too_long_is_killed(tmp_path, sandbox):
    path = write_shell_plugin(tmp_path, "slow_plugin", "sleep 60 & sleep 60\n")
    with pytest.raises(PluginError, match="did not finish within 0.5 s"):
        run_plugin(Plugin(path, ("copy",)), [FileTransfer("copy:///x", "x")], folder=sandbox,
                   env=plugin_env(), timeout_s=0.5)


def test_running_a_missing_or_unrunnable_plugin_is_named(tmp_path, sandbox):
    with pytest.raises(PluginError, match="does not exist"):
        run_plugin(Plugin(tmp_path / "gone", ("copy",)), [FileTransfer("copy:///x", "x")],
                   folder=sandbox, timeout_s=5)
    text = tmp_path / "text"
    text.write_text("not a program")
    with pytest.raises(PluginError, match="is not executable"):
        run_plugin(Plugin(text, ("copy",)), [FileTransfer("copy:///x", "x")], folder=sandbox,
                   timeout_s=5)
    no_interpreter = write_shell_plugin(tmp_path, "odd", "")
    no_interpreter.write_text("#!/no/such/interpreter\n")
    with pytest.raises(PluginError, match="cannot run transfer plugin"):
        run_plugin(Plugin(no_interpreter, ("copy",)), [FileTransfer("copy:///x", "x")],
                   folder=sandbox, timeout_s=5)


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", ""])
def test_a_local_name_outside_the_folder_is_refused(name):
    with pytest.raises(PluginError, match="leaves the job's folder"):
        check_local_name(name)


# A shell plugin (the job's user may not run this test's Python): copies the one
# file it is given and records who it ran as.
SHELL_COPY_PLUGIN = """\
    url=$(sed -n 's/^ *Url = "\\(.*\\)";* *$/\\1/p' "$2")
    local=$(sed -n 's/^ *LocalFileName = "\\(.*\\)";* *$/\\1/p' "$2")
    id -u > "$RECORD"
    cp "${url#copy://}" "$local" || exit 1
    printf '[TransferSuccess = true; TransferUrl = "%s"; TransferFileName = "%s"]' \\
        "$url" "$local" > "$4"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the job's user needs root")
def test_a_plugin_runs_as_the_user_it_is_given(job_tmp):
    nobody = pwd.getpwnam("nobody")
    sources = job_tmp / "sources"
    sources.mkdir()
    (sources / "a.txt").write_text("alpha\n")
    sandbox = job_tmp / "sandbox"
    sandbox.mkdir()
    os.chown(sandbox, nobody.pw_uid, nobody.pw_gid)
    record = job_tmp / "record"
    record.touch()
    record.chmod(0o666)
    plugin = Plugin(write_shell_plugin(job_tmp, "copy_plugin", SHELL_COPY_PLUGIN), ("copy",))
    run = run_plugin(plugin, [FileTransfer(f"copy://{sources}/a.txt", "a.txt")], folder=sandbox,
                     env=plugin_env(record), timeout_s=60, run_as=(nobody.pw_uid, nobody.pw_gid))
    assert run.ok, run.failure()
    assert record.read_text().strip() == str(nobody.pw_uid)
    assert (sandbox / "a.txt").stat().st_uid == nobody.pw_uid
    assert (sandbox / "a.txt").read_text() == "alpha\n"


# -- reading ads ---------------------------------------------------------------------------


def test_ads_are_read_in_either_format():
    new = parse_ads('[a = 1; s = "x]y"]\n[b = {1, [c = 2]}]\n\0\0  ', "out")
    assert [ad.get("a") for ad in new] == [1, None] and new[1].eval("b")[1].eval("c") == 2
    old = parse_ads("a = 1\nb = \"two\"\n\nc = 3\n", "out")
    assert [dict(ad.items()) for ad in old] == [{"a": 1, "b": "two"}, {"c": 3}]
