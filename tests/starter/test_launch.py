"""Both routes that start a job's main process give it the same world.

`posix_spawn` (a starter under the zygote) and the fork with a child-side
step (a starter on its own) must agree on the job's ids, groups, directory,
session, signal dispositions, descriptors and cores, and the spawning
process must get its own ids, groups and directory back. A real job
(`/bin/sh`) reports what it sees from /proc.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchwork.errors import JobStartError
from fetchwork.starter import launch
from fetchwork.starter.jobspec import LaunchPlan

pytestmark = pytest.mark.timeout(60)

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
NOBODY = (65534, 65534)

REPORT = ("grep -E '^(Uid|Gid|Groups|SigIgn|SigBlk|Cpus_allowed_list):' /proc/self/status; "
          "echo cwd $(pwd); echo sid $(cut -d' ' -f6 /proc/self/stat); "
          "echo fds $(ls /proc/self/fd | tr '\\n' ' '); echo env $FW_LAUNCH")


@pytest.fixture(params=[True, False], ids=["spawned", "forked"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    monkeypatch.setattr(launch, "orphans_are_killed", request.param)
    yield request.param


def _plan(folder: Path, argv: tuple[str, ...], out: Path) -> LaunchPlan:
    return LaunchPlan(argv=argv, env={"FW_LAUNCH": "given", "PATH": "/usr/bin:/bin"},
                      cwd=str(folder), stdin_path=os.devnull, stdout_path=str(out),
                      stderr_path=str(out), kill_sig=signal.SIGTERM)


def _run(plan: LaunchPlan, user: tuple[int, int] | None,
         cores: tuple[int, ...] | None = None) -> dict[str, str]:
    with open(plan.stdin_path, "rb") as stdin, open(plan.stdout_path, "wb") as out:
        pid = launch.start(plan, user, cores, (stdin.fileno(), out.fileno(), out.fileno()))
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    seen = {}
    for line in Path(plan.stdout_path).read_text().splitlines():
        key, _sep, value = line.partition(" ") if not line[:1].isupper() else line.partition(":")
        seen[key] = " ".join(value.split())
    return seen


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def test_the_job_gets_its_folder_session_environment_and_default_signals(
        job_tmp: Path, route: bool) -> None:
    folder = _folder(job_tmp)
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)  # as a C library might leave one
    here = os.getcwd()
    try:
        seen = _run(_plan(folder, ("/bin/sh", "-c", REPORT), folder / "out"), None)
    finally:
        os.close(leaked)
    assert seen["cwd"] == str(folder) and os.getcwd() == here
    assert seen["env"] == "given"
    assert seen["sid"] != str(os.getsid(0))  # a session of its own
    ignored = int(seen["SigIgn"], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))  # Python ignores it; the job must not
    assert int(seen["SigBlk"], 16) == 0
    assert str(leaked) not in seen["fds"].split()


@as_root
def test_the_job_runs_as_its_user_with_no_groups_and_root_is_given_back(
        job_tmp: Path, route: bool) -> None:
    folder = _folder(job_tmp)
    groups = os.getgroups()
    seen = _run(_plan(folder, ("/bin/sh", "-c", REPORT), folder / "out"), NOBODY)
    assert seen["Uid"] == "65534 65534 65534 65534"  # real, effective, saved, file system
    assert seen["Gid"] == "65534 65534 65534 65534"
    assert seen["Groups"] == ""
    assert os.getresuid() == (0, 0, 0) and os.getresgid() == (0, 0, 0)
    assert os.getgroups() == groups


@as_root
def test_only_the_spawning_thread_takes_the_job_users_ids() -> None:
    inside, other = [], []
    look = threading.Event()

    def other_thread() -> None:  # started before the switch, looking during it
        look.wait(30)
        other.append((os.getresuid(), os.getresgid()))

    thread = threading.Thread(target=other_thread)
    thread.start()
    with launch._as_real(NOBODY):
        inside.append((os.getresuid(), os.getresgid(), os.getgroups()))
        look.set()
        thread.join(30)
    assert inside == [((65534, 0, 0), (65534, 0, 0), [])]
    assert other == [((0, 0, 0), (0, 0, 0))]
    assert os.getresuid() == (0, 0, 0) and os.getresgid() == (0, 0, 0)


def test_the_job_is_pinned_to_its_cores_and_the_starter_is_not(
        job_tmp: Path, route: bool) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    folder = _folder(job_tmp)
    seen = _run(_plan(folder, ("/bin/sh", "-c", REPORT), folder / "out"), None,
                cores=(allowed[-1],))
    assert seen["Cpus_allowed_list"] == str(allowed[-1])
    assert sorted(os.sched_getaffinity(0)) == allowed


@pytest.mark.parametrize("make, code", [
    (lambda folder: folder / "missing", 2),
    (lambda folder: _not_executable(folder), 13),
])
def test_a_program_that_cannot_run_is_a_start_error_with_its_errno(
        job_tmp: Path, route: bool, make, code: int) -> None:
    folder = _folder(job_tmp)
    program = make(folder)
    with pytest.raises(JobStartError, match=f"Failed to execute '{program}'.*errno {code}") as err:
        _run(_plan(folder, (str(program),), folder / "out"), NOBODY if os.geteuid() == 0 else None)
    assert err.value.errno == code
    assert os.getresuid()[0] == os.geteuid()  # ids given back after a failure too


def _not_executable(folder: Path) -> Path:
    path = folder / "data"
    path.write_text("not a program\n")
    path.chmod(0o644)
    return path


@as_root
def test_a_program_only_root_may_run_is_refused_to_the_job_user(
        job_tmp: Path, route: bool) -> None:
    folder = _folder(job_tmp)
    program = folder / "secret"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o700)
    with pytest.raises(JobStartError, match="errno 13"):
        _run(_plan(folder, (str(program),), folder / "out"), NOBODY)


def test_the_jobs_streams_are_its_own_and_closed_in_the_starter(
        job_tmp: Path, route: bool) -> None:
    # Opened as plain descriptors: the job writes Out (truncated first) and Err, reads
    # In, and a starter that runs job after job keeps none of them open.
    from fetchwork.starter.jobprocess import JobProcess
    from tests.support.waiting import wait_until

    folder = _folder(job_tmp)
    (folder / "in").write_text("given\n")
    out, err = folder / "out", folder / "err"
    out.write_text("left from before, longer than what the job writes\n")
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(5):
        plan = LaunchPlan(argv=("/bin/sh", "-c", "read x; echo out $x; echo err >&2"),
                          env={"PATH": "/usr/bin:/bin"}, cwd=str(folder),
                          stdin_path=str(folder / "in"), stdout_path=str(out),
                          stderr_path=str(err), kill_sig=signal.SIGTERM)
        job = JobProcess(plan, None, ("FW_MARK", "x"))
        job.spawn()
        wait_until(job.main_exited, 30, what="the job to end")
        assert job.reap_main() == 0
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert out.read_text() == "out given\n" and err.read_text() == "err\n"
