"""URL transfers through file-transfer plugins, with HTCondor's plugin protocol.

A plugin is an executable. Asked `plugin -classad`, it prints one ad (old
format, a line per attribute) with `SupportedMethods` (the URL schemes it
serves, comma-separated), `MultipleFileSupport` (true) and a version
(`PluginVersion`, or `Version` in HTCondor's example plugin). A transfer runs
`plugin -infile IN -outfile OUT [-upload]`: IN holds one ad per file (`Url`,
`LocalFileName`, new format), OUT gets one ad per file back (`TransferSuccess`,
`TransferError`, `TransferUrl`, `TransferFileName`, `TransferTotalBytes`, and
often `TransferProtocol`, `TransferType`, `TransferStartTime`,
`TransferEndTime`). Exit code 0 means every file was transferred; any other
code is a failure, and HTCondor makes it the held job's `HoldReasonSubCode`.
Plugins written for HTCondor's protocol version 2 or 4 (the curl plugin, the
Pelican/OSDF and S3 plugins, the example plugin in HTCondor's sources) run
unchanged; protocol version 1 (one file per run) is not spoken.

Which plugin serves a scheme (`PluginRegistry`): the execute machine's plugins
come from FILETRANSFER_PLUGINS (a list of paths, queried with `-classad`;
when two serve a scheme the later one wins, as in HTCondor), and a job's own
from its `TransferPlugins` (`methods=path; ...`, shipped with the job, never
queried: the methods are the ones it names). A job's plugin wins for its
methods, as in HTCondor.

`run_plugin` runs one plugin for a batch of files in one folder, with the
environment and the account switch the caller gives (the starter runs it as
the job's user), under a timeout, and returns a `PluginRun` with one
`TransferResult` per file. A plugin that cannot be run, runs too long, dies of
a signal, or answers outside the protocol raises PluginError naming the
plugin and what went wrong.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import classad2

from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import AdError, ConfigError, FetchworkError

log = logging.getLogger(__name__)

# Seconds a `-classad` query may take (HTCondor sets no separate limit).
QUERY_TIMEOUT_S = 20.0
# The end of a plugin's standard output and error kept for messages.
OUTPUT_TAIL_BYTES = 4096
IN_FILE = "in.ads"
OUT_FILE = "out.ads"
OUTPUT_FILE = "plugin.out"


class PluginError(FetchworkError):
    """A transfer plugin is missing, cannot be run, or broke the plugin protocol."""

    def __init__(self, message: str, plugin: str = "", exit_code: int | None = None):
        super().__init__(message)
        self.plugin = plugin
        # The plugin's exit code when it exited (HTCondor's HoldReasonSubCode), else None.
        self.exit_code = exit_code


class Direction(enum.Enum):
    """Which way files go: a download fills the folder, an upload reads it."""

    DOWNLOAD = "download"
    UPLOAD = "upload"


@dataclass(frozen=True)
class Plugin:
    """A plugin and the URL schemes it serves."""

    path: Path
    methods: tuple[str, ...]
    version: str = ""
    from_job: bool = False   # a job's own (TransferPlugins), not the machine's


@dataclass(frozen=True)
class FileTransfer:
    """One file of a batch: its URL and its name in the folder (relative)."""

    url: str
    local_name: str


@dataclass(frozen=True)
class TransferResult:
    """What a plugin reported for one file (HTCondor's output ad, typed)."""

    url: str
    local_name: str
    success: bool
    error: str = ""
    total_bytes: int | None = None
    protocol: str = ""
    transfer_type: str = ""
    start_time: int | None = None
    end_time: int | None = None
    ad: Mapping[str, Any] = field(default_factory=dict)  # the ad as it came, for the stats


@dataclass(frozen=True)
class PluginRun:
    """One run of a plugin over a batch: its exit code and one result per file."""

    plugin: Plugin
    direction: Direction
    exit_code: int
    results: tuple[TransferResult, ...]
    seconds: float
    output_tail: str = ""

    @property
    def ok(self) -> bool:
        """Every file transferred: exit code 0 and every result a success."""
        return self.exit_code == 0 and all(result.success for result in self.results)

    def failure(self) -> str:
        """One line for a hold reason ('' when ok): the plugin, its exit code, and the
        first file that failed with the plugin's own words."""
        if self.ok:
            return ""
        failed = next((result for result in self.results if not result.success), None)
        head = f"{self.direction.value} plugin {self.plugin.path} exited with code {self.exit_code}"
        if failed is None:
            detail = "though it reported every file as transferred"
            if self.output_tail.strip():
                detail += f"; it said: {_one_line(self.output_tail)[-300:]}"
            return f"{head} {detail}"
        return f"{head}: {failed.url} ({failed.local_name}): {failed.error or 'no reason given'}"


# -- the registry ----------------------------------------------------------------------------


def _methods(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(word.strip().lower() for word in text.replace(";", ",").split(",")
                               if word.strip()))


def scheme_of(url: str) -> str:
    """The scheme of a URL (the part before `://`), lower case; '' when none."""
    head, sep, _rest = url.partition("://")
    return head.strip().lower() if sep and head.strip() else ""


def resolve_plugin_path(entry: str) -> Path:
    """A FILETRANSFER_PLUGINS entry as a path: a bare name (no `/`) is looked up where
    fetchwork's own commands are installed, then on PATH (so the default,
    `fetchwork-http-plugin`, is found wherever fetchwork is installed)."""
    if "/" in entry:
        return Path(entry)
    scripts = sysconfig.get_path("scripts")
    candidate = Path(scripts) / entry if scripts else None
    if candidate is not None and candidate.is_file():
        return candidate
    found = shutil.which(entry)
    return Path(found) if found else Path(entry)


def check_executable(path: Path) -> None:
    """PluginError unless `path` is a file this process may run."""
    if not path.is_absolute():
        raise PluginError(f"transfer plugin {str(path)!r} is not an absolute path (nor a "
                          "command found where fetchwork is installed or on PATH)", str(path))
    if not path.exists():
        raise PluginError(f"transfer plugin {path} does not exist", str(path))
    if not path.is_file():
        raise PluginError(f"transfer plugin {path} is not a file", str(path))
    if not os.access(path, os.X_OK):
        raise PluginError(f"transfer plugin {path} is not executable (chmod +x it)", str(path))


def query_plugin(path: Path, env: Mapping[str, str] | None = None,
                 timeout_s: float = QUERY_TIMEOUT_S) -> Plugin:
    """Ask a plugin for its schemes (`plugin -classad`); PluginError when it cannot say."""
    check_executable(path)
    try:
        done = subprocess.run([str(path), "-classad"], capture_output=True, timeout=timeout_s,
                              env=dict(env) if env is not None else None, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise PluginError(f"transfer plugin {path} did not answer -classad within "
                          f"{timeout_s:g} s", str(path)) from exc
    except OSError as exc:
        raise PluginError(f"cannot run transfer plugin {path}: {exc.strerror or exc}",
                          str(path)) from exc
    if done.returncode != 0:
        raise PluginError(f"transfer plugin {path} -classad exited with code {done.returncode}"
                          f"{_said(done.stderr)}", str(path), done.returncode)
    text = done.stdout.decode("utf-8", errors="replace")
    try:
        ad = parse_ad(text, f"{path} -classad") if text.strip() else None
    except AdError as exc:
        raise PluginError(f"transfer plugin {path} -classad printed no ClassAd: {exc}",
                          str(path)) from exc
    methods = _text(ad, "SupportedMethods") if ad is not None else ""
    if ad is None or not _methods(methods):
        raise PluginError(f"transfer plugin {path} -classad names no SupportedMethods",
                          str(path))
    if _value(ad, "MultipleFileSupport") is not True:
        raise PluginError(f"transfer plugin {path} lacks MultipleFileSupport = true: it speaks "
                          "only the one-file-per-run protocol, which fetchwork does not run",
                          str(path))
    version = _text(ad, "PluginVersion") or _text(ad, "Version")
    return Plugin(path, _methods(methods), version)


def parse_job_plugins(text: str, folder: Path | None = None) -> list[Plugin]:
    """A job's TransferPlugins (`methods=path; ...`) as plugins. As in HTCondor, each
    plugin travels in the job's input sandbox under its own name: with `folder`, the
    plugin is `folder/<name>`. PluginError names an entry without `=`."""
    plugins = []
    for entry in text.split(";"):
        if not entry.strip():
            continue
        methods, sep, path_text = entry.partition("=")
        path_text = path_text.strip()
        if not sep or not _methods(methods) or not path_text:
            raise PluginError(f"TransferPlugins entry {entry.strip()!r} is not "
                              "'methods=path' (e.g. 'example=example_plugin.py')")
        path = folder / PurePosixPath(path_text).name if folder is not None else Path(path_text)
        plugins.append(Plugin(path, _methods(methods), from_job=True))
    return plugins


@dataclass(frozen=True)
class PluginRegistry:
    """Which plugin serves each URL scheme, with what went wrong finding them."""

    by_method: Mapping[str, Plugin]
    problems: tuple[str, ...] = ()

    @classmethod
    def from_plugins(cls, plugins: Iterable[Plugin],
                     problems: Iterable[str] = ()) -> PluginRegistry:
        """Later plugins win a scheme over earlier ones."""
        table: dict[str, Plugin] = {}
        for plugin in plugins:
            for method in plugin.methods:
                table[method] = plugin
        return cls(table, tuple(problems))

    @classmethod
    def query(cls, entries: Iterable[str], env: Mapping[str, str] | None = None,
              timeout_s: float = QUERY_TIMEOUT_S) -> PluginRegistry:
        """The machine's plugins: each entry of FILETRANSFER_PLUGINS queried in turn. A
        plugin that fails its query is logged and left out (its schemes then have no
        plugin, and a job that needs one is held saying why)."""
        plugins, problems = [], []
        for entry in entries:
            try:
                plugins.append(query_plugin(resolve_plugin_path(entry), env, timeout_s))
            except PluginError as exc:
                log.warning("FILETRANSFER_PLUGINS: %s; its URL schemes are not served", exc)
                problems.append(str(exc))
        return cls.from_plugins(plugins, problems)

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> PluginRegistry:
        """The machine's plugins from FILETRANSFER_PLUGINS (nothing when
        ENABLE_URL_TRANSFERS is false)."""
        if not config.get_bool("ENABLE_URL_TRANSFERS"):
            return cls({}, ("URL transfers are disabled on this machine "
                            "(ENABLE_URL_TRANSFERS = false)",))
        return cls.query(config.get_list("FILETRANSFER_PLUGINS"), env)

    def with_job(self, transfer_plugins: str | None, folder: Path | None = None) -> PluginRegistry:
        """This registry with a job's own plugins (its TransferPlugins), which win for
        the methods they name."""
        if not transfer_plugins or not transfer_plugins.strip():
            return self
        table = dict(self.by_method)
        for plugin in parse_job_plugins(transfer_plugins, folder):
            for method in plugin.methods:
                table[method] = plugin
        return PluginRegistry(table, self.problems)

    def plugin_for(self, url: str) -> Plugin:
        """The plugin serving `url`'s scheme; PluginError saying why there is none."""
        scheme = scheme_of(url)
        if not scheme:
            raise PluginError(f"{url!r} is not a URL (expected scheme://...)")
        plugin = self.by_method.get(scheme)
        if plugin is None:
            served = ", ".join(sorted(self.by_method)) or "none"
            why = f"; {'; '.join(self.problems)}" if self.problems else ""
            raise PluginError(f"no transfer plugin serves {scheme}:// URLs such as {url} "
                              f"(served here: {served}; see FILETRANSFER_PLUGINS and "
                              f"transfer_plugins){why}")
        return plugin


def plugin_lifetime_s(config: Config) -> float:
    """How long a transfer plugin may run (MAX_FILE_TRANSFER_PLUGIN_LIFETIME, seconds)."""
    lifetime_s = config.get_duration_s("MAX_FILE_TRANSFER_PLUGIN_LIFETIME")
    if lifetime_s <= 0:
        where = config.where("MAX_FILE_TRANSFER_PLUGIN_LIFETIME")
        raise ConfigError(f"MAX_FILE_TRANSFER_PLUGIN_LIFETIME must be above 0, not {lifetime_s:g}",
                          where.source if where else None, where.line if where else None)
    return lifetime_s


# -- running a plugin ------------------------------------------------------------------------


def check_local_name(name: str) -> str:
    """`name` if it stays inside the folder (relative, no `..`); PluginError otherwise."""
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or ".." in parts or "\0" in name:
        raise PluginError(f"file name {name!r} leaves the job's folder (absolute or with '..')")
    return name


def input_ads_text(files: Sequence[FileTransfer], folder: Path) -> str:
    """The plugin's input file: one new-format ad per file, with the full local path."""
    return "".join(str(classad2.ClassAd({"Url": item.url,
                                         "LocalFileName": str(folder / item.local_name)}))
                   + "\n" for item in files)


def run_plugin(plugin: Plugin, files: Sequence[FileTransfer], *, folder: Path,
               direction: Direction = Direction.DOWNLOAD, env: Mapping[str, str] | None = None,
               timeout_s: float, preexec_fn: Callable[[], None] | None = None,
               run_as: tuple[int, int] | None = None) -> PluginRun:
    """Run `plugin` once for `files` in `folder` (its working folder; local names are
    relative to it) and read its answer.

    `env` is the plugin's whole environment (None: this process's). `run_as` is a
    (uid, gid) to switch to, and `preexec_fn` runs in the child before the plugin
    (the caller's own switch); the plugin's input and output files are made for that
    user. PluginError when the plugin cannot be run, outlives `timeout_s`, dies of a
    signal, or writes no answer or one outside the protocol.
    """
    if not files:
        return PluginRun(plugin, direction, 0, (), 0.0)
    for item in files:
        check_local_name(item.local_name)
    check_executable(plugin.path)
    scratch = Path(tempfile.mkdtemp(prefix=".transfer-plugin-", dir=folder))
    try:
        in_path, out_path = scratch / IN_FILE, scratch / OUT_FILE
        in_path.write_text(input_ads_text(files, folder), encoding="utf-8")
        out_path.touch()
        output_path = scratch / OUTPUT_FILE
        output_path.touch()
        if run_as is not None:
            for path in (scratch, in_path, out_path, output_path):
                os.chown(path, run_as[0], run_as[1])
        argv = [str(plugin.path), "-infile", str(in_path), "-outfile", str(out_path)]
        if direction is Direction.UPLOAD:
            argv.append("-upload")
        started = time.monotonic()
        exit_code = _run(argv, folder, env, timeout_s, preexec_fn, run_as, output_path, plugin)
        seconds = time.monotonic() - started
        tail = _tail(output_path)
        answer = out_path.read_bytes()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = read_results(answer, files, folder, direction, plugin, exit_code, tail)
    return PluginRun(plugin, direction, exit_code, tuple(results), seconds, tail)


def _run(argv: list[str], folder: Path, env: Mapping[str, str] | None, timeout_s: float,
         preexec_fn: Callable[[], None] | None, run_as: tuple[int, int] | None,
         output_path: Path, plugin: Plugin) -> int:
    """The plugin's exit code; PluginError when it cannot start, times out or is killed."""
    name = str(plugin.path)
    ids: dict[str, Any] = {}
    if run_as is not None:
        ids = {"user": run_as[0], "group": run_as[1], "extra_groups": []}
    with open(output_path, "wb") as output:
        try:
            process = subprocess.Popen(argv, cwd=folder, env=dict(env) if env is not None
                                       else None, stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=preexec_fn, **ids)
        except (OSError, subprocess.SubprocessError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise PluginError(f"cannot run transfer plugin {name}: {why}", name) from exc
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise PluginError(f"transfer plugin {name} did not finish within {timeout_s:g} s "
                              "(MAX_FILE_TRANSFER_PLUGIN_LIFETIME) and was killed", name) from exc
        finally:
            with contextlib.suppress(OSError):  # nothing it started outlives it
                os.killpg(process.pid, signal.SIGKILL)
    if code < 0:
        raise PluginError(f"transfer plugin {name} was killed by signal {-code} "
                          f"({_signal_name(-code)}){_said(_tail(output_path).encode())}", name)
    return code


def read_results(answer: bytes, files: Sequence[FileTransfer], folder: Path,
                 direction: Direction, plugin: Plugin, exit_code: int,
                 output_tail: str = "") -> list[TransferResult]:
    """One result per file from the plugin's output file. A file the plugin said
    nothing about failed; a success whose downloaded file is not there failed.
    PluginError when the answer is not ads, or speaks of files it was not given."""
    name = str(plugin.path)
    said = _said(output_tail.encode())
    text = answer.decode("utf-8", errors="replace").strip(" \t\r\n\0")
    if not text:
        raise PluginError(f"transfer plugin {name} exited with code {exit_code} and wrote no "
                          f"answer to its -outfile{said}", name, exit_code)
    try:
        ads = parse_ads(text, f"{name} -outfile")
    except AdError as exc:
        raise PluginError(f"transfer plugin {name} exited with code {exit_code} and its "
                          f"-outfile is not ClassAds: {exc}", name, exit_code) from exc
    by_key = {_key(item, folder): item for item in files}
    by_url: dict[str, list[FileTransfer]] = {}
    for item in files:
        by_url.setdefault(item.url, []).append(item)
    found: dict[FileTransfer, TransferResult] = {}
    for ad in ads:
        matched = _match(ad, by_key, by_url, folder)
        if matched is None:
            raise PluginError(f"transfer plugin {name} answered for a file it was not given "
                              f"({_text(ad, 'TransferUrl')!r}, "
                              f"{_text(ad, 'TransferFileName')!r})", name, exit_code)
        found[matched] = _result(ad, matched, folder, direction)
    results = []
    for item in files:
        result = found.get(item)
        if result is None:
            result = TransferResult(item.url, item.local_name, False,
                                    "the plugin reported nothing for this file")
        results.append(result)
    return results


def parse_ads(text: str, source: str) -> list[classad2.ClassAd]:
    """A sequence of ClassAds: new format (`[...]` one after another) or old format
    (blocks of `Name = value` lines separated by blank lines). AdError on anything else."""
    if text.lstrip().startswith("["):
        return [parse_ad(block, source) for block in split_new_ads(text, source)]
    blocks = [block for block in _paragraphs(text) if block.strip()]
    return [parse_ad(block, source) for block in blocks]


def split_new_ads(text: str, source: str) -> list[str]:
    """The top-level `[...]` blocks of `text` (strings and nesting respected); AdError
    for text outside them or an unclosed block."""
    blocks: list[str] = []
    depth, start, quoted, escaped = 0, -1, False, False
    for index, char in enumerate(text):
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
            continue
        if char == '"' and depth:
            quoted = True
        elif char in "[{(":
            if depth == 0:
                if char != "[":
                    raise AdError(f"unexpected {char!r} at offset {index}", None, source)
                start = index
            depth += 1
        elif char in "]})":
            depth -= 1
            if depth < 0:
                raise AdError(f"unbalanced {char!r} at offset {index}", None, source)
            if depth == 0:
                blocks.append(text[start:index + 1])
        elif depth == 0 and not char.isspace() and char not in "\0,;":
            raise AdError(f"text outside any ad at offset {index}: "
                          f"{_one_line(text[index:index + 40])!r}", None, source)
    if depth or quoted:
        raise AdError("the last ad is not closed", None, source)
    return blocks


def _paragraphs(text: str) -> list[str]:
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def _key(item: FileTransfer, folder: Path) -> tuple[str, str]:
    return item.url, os.path.normpath(folder / item.local_name)


def _match(ad: classad2.ClassAd, by_key: Mapping[tuple[str, str], FileTransfer],
           by_url: Mapping[str, list[FileTransfer]], folder: Path) -> FileTransfer | None:
    """The file of the batch an output ad speaks of: by URL and file name, else by URL
    alone when one file of the batch has it (a plugin may write the name otherwise)."""
    url = _text(ad, "TransferUrl")
    file_name = _text(ad, "TransferFileName")
    if file_name:
        path = os.path.normpath(folder / file_name)  # an absolute name stays itself
        item = by_key.get((url, path))
        if item is not None:
            return item
    candidates = by_url.get(url, [])
    return candidates[0] if len(candidates) == 1 else None


def _result(ad: classad2.ClassAd, item: FileTransfer, folder: Path,
            direction: Direction) -> TransferResult:
    success = _value(ad, "TransferSuccess") is True
    error = _text(ad, "TransferError")
    if success and direction is Direction.DOWNLOAD:
        local = folder / item.local_name
        if local.is_symlink() or not local.is_file():
            success = False
            error = (f"the plugin reported success but {item.local_name} is not a regular "
                     "file in the job's folder")
    if not success and not error:
        error = "the plugin reported a failure without TransferError"
    plain = {}
    for key in ad.keys():
        value = _value(ad, key)
        if isinstance(value, bool | int | float | str):
            plain[key] = value
    return TransferResult(
        item.url, item.local_name, success, error,
        total_bytes=_whole(ad, "TransferTotalBytes"),
        protocol=_text(ad, "TransferProtocol"),
        transfer_type=_text(ad, "TransferType") or direction.value,
        start_time=_whole(ad, "TransferStartTime"),
        end_time=_whole(ad, "TransferEndTime"),
        ad=plain)


# -- small helpers ---------------------------------------------------------------------------


def _value(ad: classad2.ClassAd | None, name: str) -> object:
    if ad is None or name not in ad:
        return None
    try:
        return ad.eval(name)
    except Exception:  # classad2 raises its own type for an expression it cannot evaluate
        return None


def _text(ad: classad2.ClassAd | None, name: str) -> str:
    value = _value(ad, name)
    return value if isinstance(value, str) else ""


def _whole(ad: classad2.ClassAd, name: str) -> int | None:
    value = _value(ad, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - OUTPUT_TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _said(output: bytes) -> str:
    text = _one_line(output.decode("utf-8", errors="replace"))
    return f"; it said: {text[-300:]}" if text else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"
