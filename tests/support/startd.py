"""Standing up a real startd for the startd tests (no tests of its own).

A `Pool` writes a configuration file, hook programs (or an importable module
of in-process hooks with the same behaviour) and job ads into `tmp_path`, and
runs `python -m fetchwork.startd` with FETCHWORK_CONFIG pointing at it. The
hooks record every call (time, arguments, stdin) as one file per call under
`calls/<hook>/`; the fetch hook hands out the job files of `jobs/<KEYWORD>/`
in name order, one per call, and nothing once they run out.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import terminate
from tests.support.waiting import wait_until

HOOKS = ("fetch", "reply", "evict", "prepare", "exit")
# FetchWorkDelay for tests that queue several jobs per slot: 0 on an idle
# claim, 1 s when unclaimed, and no fetch while a job runs (a fetched job
# with a RANK no higher than the running one's would be rejected).
QUEUE_DELAY = 'ifThenElse(Activity == "Busy", 300, ifThenElse(State == "Claimed", 0, 1))'
# Fetch hooks that misbehave: `hang` records its call then sleeps 30 s (in a
# child process, for program hooks); `crash` fails without output.
BAD_FETCH = ("hang", "crash")
HOOK_KNOBS = {"fetch": "FETCH_WORK", "reply": "REPLY_FETCH", "evict": "EVICT_CLAIM",
              "prepare": "PREPARE_JOB", "exit": "JOB_EXIT"}

# One program per hook kind; $1.. are the hook's arguments. KIND, CALLS and
# JOBS are filled in. Each call leaves calls/KIND/<ns>.<pid>: the wall-clock
# time in ns, the arguments, then stdin.
_PROGRAM = """\
#!/bin/sh
t=$(date +%s%N)
f="CALLS/KIND/$t.$$"
{ echo "$t"; echo "$*"; cat; } > "$f.tmp"
mv "$f.tmp" "$f"
if [ KIND = fetch ]; then
  kw="$1"
  for job in JOBS/"$kw"/*; do
    [ -e "$job" ] || break
    case "$job" in *.taken) continue ;; esac
    if mv "$job" "$job.taken" 2>/dev/null; then cat "$job.taken"; break; fi
  done
fi
if [ KIND = hang ]; then sleep 30; fi
if [ KIND = crash ]; then kill -SEGV $$; fi
"""

_MODULE = '''\
"""In-process hooks with the behaviour of the test programs."""
import os
import time

CALLS = {calls!r}
JOBS = {jobs!r}


def _record(kind, args, stdin_text):
    t = time.time_ns()
    path = os.path.join(CALLS, kind, "%d.%d" % (t, os.getpid()))
    with open(path + ".tmp", "w") as handle:
        handle.write("%d\\n%s\\n%s" % (t, " ".join(args), stdin_text))
    os.rename(path + ".tmp", path)
    return path


def fetch(args, stdin_text):
    _record("fetch", args, stdin_text)
    keyword = args[0] if args else ""
    folder = os.path.join(JOBS, keyword)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".taken"):
            continue
        job = os.path.join(folder, name)
        try:
            os.rename(job, job + ".taken")
        except OSError:
            continue
        with open(job + ".taken") as handle:
            return handle.read()
    return None


def reply(args, stdin_text):
    _record("reply", args, stdin_text)


def evict(args, stdin_text):
    _record("evict", args, stdin_text)


def prepare(args, stdin_text):
    _record("prepare", args, stdin_text)


def exit(args, stdin_text):
    _record("exit", args, stdin_text)


def hang(args, stdin_text):
    _record("hang", args, stdin_text)
    time.sleep(30)


def crash(args, stdin_text):
    _record("crash", args, stdin_text)
    raise RuntimeError("this hook crashes")
'''


@dataclass
class Call:
    """One recorded hook call."""

    at_s: float
    args: list[str]
    stdin: str
    pid: int = 0

    def attr(self, name: str) -> str | None:
        """The text of `name = ...` in the first ad of stdin (before any `-----`)."""
        for line in self.stdin.split("-----")[0].splitlines():
            key, _, value = line.partition(" = ")
            if key.strip() == name:
                return value.strip()
        return None

    def slot_attr(self, name: str) -> str | None:
        """The text of `name = ...` in the second ad (after `-----`)."""
        parts = self.stdin.split("\n-----\n")
        if len(parts) < 2:
            return None
        for line in parts[1].splitlines():
            key, _, value = line.partition(" = ")
            if key.strip() == name:
                return value.strip()
        return None


class Pool:
    """A startd with test hooks under `root`. `mode` is "program" or "python"."""

    def __init__(self, root: Path, mode: str = "program"):
        self.root = root
        self.mode = mode
        self.calls_dir = root / "calls"
        self.jobs_dir = root / "jobs"
        self.hook_dir = root / "hooks"
        self.state_dir = root / "state"
        for path in (self.hook_dir, self.jobs_dir, self.state_dir):
            path.mkdir(parents=True, exist_ok=True)
        for kind in HOOKS + BAD_FETCH:
            (self.calls_dir / kind).mkdir(parents=True, exist_ok=True)
            # Starter hooks run as the job's user (nobody when the tests run as root).
            (self.calls_dir / kind).chmod(0o1777)
        self.proc: subprocess.Popen[bytes] | None = None
        self.status: int | None = None     # the startd's exit status, once known
        self.took_s: float | None = None   # how long it took to exit after a signal
        self._job_numbers = 0
        self.module = f"fwtesthooks_{os.getpid()}_{abs(hash(str(root))) % 10**8}"
        (root / f"{self.module}.py").write_text(_MODULE.format(calls=str(self.calls_dir),
                                                               jobs=str(self.jobs_dir)))

    # -- configuration -----------------------------------------------------

    def hook_value(self, kind: str) -> str:
        """The value of a `<KW>_HOOK_<NAME>` knob for hook `kind` in this pool's mode."""
        if self.mode == "python":
            return f"python:{self.module}:{kind}"
        path = self.hook_dir / kind
        if not path.exists():
            path.write_text(_PROGRAM.replace("CALLS", str(self.calls_dir))
                            .replace("JOBS", str(self.jobs_dir)).replace("KIND", kind))
            path.chmod(0o755)
        return str(path)

    def keyword_config(self, keyword: str, kinds: tuple[str, ...] = HOOKS,
                       fetch: str = "fetch") -> str:
        # Every hook gets its keyword as its first argument; the fetch hook
        # takes jobs from jobs/<keyword>/.
        lines = []
        for kind in kinds:
            value = self.hook_value(fetch if kind == "fetch" else kind)
            lines.append(f"{keyword}_HOOK_{HOOK_KNOBS[kind]} = {value}")
            lines.append(f"{keyword}_HOOK_{HOOK_KNOBS[kind]}_ARGS = {keyword}")
        (self.jobs_dir / keyword).mkdir(exist_ok=True)
        return "\n".join(lines) + "\n"

    def write_config(self, text: str) -> Path:
        """The config file: test-sized timers first, then `text` (which wins)."""
        base = f"""
            FETCHWORK_STATE_DIR = {self.state_dir}
            LOG = {self.root / 'log'}
            EXECUTE = {self.root / 'execute'}
            NUM_SLOTS = 1
            FETCH_WORK_MIN_INTERVAL = 0.5
            POLLING_INTERVAL = 1
            STARTER_INITIAL_UPDATE_INTERVAL = 1
            STARTER_UPDATE_INTERVAL = 1
            STARTER_SAMPLE_INTERVAL = 0.2
            MachineMaxVacateTime = 5
            STARTD_SHUTDOWN_GRACE = 20
            HOOK_TIMEOUT_FETCH_WORK = 20
        """
        path = self.root / "fetchwork.conf"
        path.write_text(textwrap.dedent(base) + textwrap.dedent(text))
        return path

    def add_job(self, keyword: str, text: str = "", cmd: str = "/bin/true",
                args: str = "") -> str:
        """Queue one job ad for the fetch hook of `keyword`; returns its id `C.P`."""
        self._job_numbers += 1
        number = self._job_numbers
        folder = self.jobs_dir / keyword
        folder.mkdir(exist_ok=True)
        body = f'Cmd = "{cmd}"\nClusterId = {number}\nProcId = 0\n'
        if args:
            body += f'Arguments = "{args}"\n'
        (folder / f"{number:05d}").write_text(body + textwrap.dedent(text))
        return f"{number}.0"

    # -- running -------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["FETCHWORK_CONFIG"] = str(self.root / "fetchwork.conf")
        env["FETCHWORK_STATE_DIR"] = str(self.state_dir)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root),
                                                          env.get("PYTHONPATH")]))
        for name in list(env):
            if name.startswith("_FETCHWORK_"):
                del env[name]
        return env

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        self.stderr_path = self.root / "startd.err"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fetchwork.startd", *args], env=self.env(),
                stdout=subprocess.DEVNULL, stderr=stderr, cwd=self.root)
        return self.proc

    def log_text(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.proc else ""

    def exited(self) -> str | None:
        """For wait_until's fail_if: the startd's exit and its last log lines."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"startd exited {self.proc.returncode}: {self.log_text()[-3000:]}"
        return None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        return terminate(self.proc, timeout_s)

    # -- what the hooks saw ----------------------------------------------------

    def calls(self, kind: str) -> list[Call]:
        found = []
        for path in sorted(self.calls_dir.joinpath(kind).iterdir()):
            if path.name.endswith(".tmp"):
                continue
            at_ns, args, stdin = (path.read_text(errors="replace").split("\n", 2) + ["", ""])[:3]
            found.append(Call(int(at_ns) / 1e9, args.split(), stdin,
                              int(path.name.rpartition(".")[2])))
        found.sort(key=lambda call: call.at_s)
        return found

    def wait_calls(self, kind: str, count: int, timeout_s: float = 30.0) -> list[Call]:
        return wait_until(lambda: (calls := self.calls(kind)) and len(calls) >= count and calls,
                          timeout_s, fail_if=self.exited, what=f"{count} {kind} hook call(s)")

    def wait_log(self, text: str, timeout_s: float = 30.0) -> str:
        return wait_until(lambda: text in self.log_text() and self.log_text(), timeout_s,
                          fail_if=self.exited, what=f"log line {text!r}")


@contextmanager
def pool_root(prefix: str) -> Iterator[Path]:
    """A fresh folder every user can reach: when the tests run as root, the
    starter runs jobs and its hooks as nobody, who cannot enter pytest's
    private tmp_path."""
    root = Path(tempfile.mkdtemp(prefix=f"fw-startd-{prefix}-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def make_world_writable(path: Path) -> None:
    path.chmod(path.stat().st_mode | stat.S_IWOTH)
