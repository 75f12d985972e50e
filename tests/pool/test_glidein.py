"""`fetchwork glidein` end to end against a pool on this machine: it fetches, runs and
finishes jobs, then exits after its no-claim time; it takes no job whose
AllowedJobDuration outlasts it; it drains running jobs back to the queue when its
lifetime ends; its scratch folder goes with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fetchwork.config.loader import environ_without_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(150)


def env_for(redis_url: str, pool: str, folder: Path, **knobs: str) -> dict[str, str]:
    env = environ_without_config()
    env.update({
        "FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool,
        "FETCHWORK_CONFIG": "/dev/null", "FETCHWORK_STATE_DIR": str(folder / "user-state"),
        "_FETCHWORK_GLIDEIN_SCRATCH": str(folder),
        "_FETCHWORK_POLLING_INTERVAL": "0.5",
        "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "0.5",
        "_FETCHWORK_STARTER_INITIAL_UPDATE_INTERVAL": "1",
        "_FETCHWORK_FETCHWORK_RENEW_INTERVAL": "0.5",
        "_FETCHWORK_MachineMaxVacateTime": "2",
        "_FETCHWORK_STARTD_SHUTDOWN_GRACE": "10",
    })
    env.update({f"_FETCHWORK_{k}": v for k, v in knobs.items()})
    return env


def fw(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "fetchwork", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"fetchwork {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def jobs(env: dict[str, str]) -> dict[str, dict]:
    """Every job of the pool, queued or finished, by id."""
    found = json.loads(fw(env, "q", "--json")) + json.loads(fw(env, "history", "--json"))
    return {f"{ad['ClusterId']}.{ad['ProcId']}": ad for ad in found}


class Pilot:
    """`fetchwork glidein` as a child: its summary on stdout, its log in glidein.log."""

    def __init__(self, env: dict[str, str], folder: Path, *args: str):
        self.folder = folder
        self.log = open(folder / "glidein.log", "w")  # noqa: SIM115 - closed in finish()
        self.process = subprocess.Popen([sys.executable, "-m", "fetchwork", "glidein", *args],
                                        env=env, cwd=folder, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True, start_new_session=True)

    def died(self) -> str | None:
        if self.process.poll() is not None:
            return f"exited {self.process.returncode}: {(self.folder / 'glidein.log').read_text()}"
        return None

    def finish(self, timeout_s: float) -> str:
        """Wait for the exit (status 0); the summary line."""
        try:
            out, _ = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise AssertionError((self.folder / "glidein.log").read_text()) from None
        finally:
            self.log.close()
        assert self.process.returncode == 0, (self.folder / "glidein.log").read_text()
        return out.strip()


def wait_admitted(env: dict[str, str], count: int) -> None:
    """Until the pool's broker has admitted `count` jobs (a glide-in's short no-claim
    time is for an empty queue, not for a broker slow to admit on a loaded machine)."""
    wait_until(lambda: sum(ad.get("FetchworkState") == "IDLE" for ad in jobs(env).values())
               >= count, 30, what=f"{count} job(s) admitted")


def scratch_folders(folder: Path) -> list[Path]:
    return list(folder.glob("fetchwork-glidein-*"))


def test_runs_jobs_then_exits_after_no_claim_time(redis_url: str, pool_name: str,
                                                  job_tmp: Path) -> None:
    env = env_for(redis_url, pool_name, job_tmp, STARTD_NOCLAIM_SHUTDOWN="3",
                  NUM_SLOTS="2")
    for _ in range(3):
        fw(env, "submit", "--", "/bin/sleep", "0.5", cwd=job_tmp)
    wait_admitted(env, 3)
    pilot = Pilot(env, job_tmp)
    wait_until(lambda: scratch_folders(job_tmp), 30, fail_if=pilot.died,
               what="the glide-in's scratch folder")
    line = pilot.finish(90)
    assert line.startswith("fetchwork glidein: ran 3 job(s)"), line
    assert line.endswith("stopped: no claim for 3s"), line
    assert "x 2 slot(s)" in line
    assert [ad["JobStatus"] for ad in jobs(env).values()] == [4, 4, 4]
    assert scratch_folders(job_tmp) == []


def test_takes_only_jobs_that_end_before_its_drain(redis_url: str, pool_name: str,
                                                    job_tmp: Path) -> None:
    env = env_for(redis_url, pool_name, job_tmp, STARTD_NOCLAIM_SHUTDOWN="3",
                  GLIDEIN_DRAIN_TIME="5", NUM_SLOTS="1")
    fw(env, "submit", "-a", "+AllowedJobDuration = 3600", "--", "/bin/true", cwd=job_tmp)
    fw(env, "submit", "-a", "+AllowedJobDuration = 30", "--", "/bin/true", cwd=job_tmp)
    wait_admitted(env, 2)
    line = Pilot(env, job_tmp, "--lifetime", "0:01:00").finish(90)
    assert "ran 1 job(s)" in line, line
    found = jobs(env)
    assert found["1.0"]["JobStatus"] == 1 and not found["1.0"].get("NumJobMatches")
    assert found["2.0"]["JobStatus"] == 4
    fw(env, "rm", "-all")


def test_drains_running_jobs_back_to_the_queue_when_its_lifetime_ends(
        redis_url: str, pool_name: str, job_tmp: Path) -> None:
    env = env_for(redis_url, pool_name, job_tmp, STARTD_NOCLAIM_SHUTDOWN="0",
                  GLIDEIN_DRAIN_TIME="4", NUM_SLOTS="1")
    fw(env, "submit", "--", "/bin/sleep", "600", cwd=job_tmp)
    pilot = Pilot(env, job_tmp, "--lifetime", "15")
    wait_until(lambda: jobs(env)["1.0"]["JobStatus"] == 2, 30, fail_if=pilot.died,
               what="the job running in the glide-in")
    line = pilot.finish(60)
    assert line.endswith("stopped: lifetime ends (drained)"), line
    assert "ran 1 job(s)" in line
    job = jobs(env)["1.0"]
    assert job["JobStatus"] == 1, job  # back in the queue for another slot
    assert scratch_folders(job_tmp) == []
    fw(env, "rm", "-all")


def test_the_slurm_script_runs_a_glidein_outside_slurm_too(redis_url: str, pool_name: str,
                                                           job_tmp: Path) -> None:
    """deploy/glidein/glidein.slurm as sbatch would run it (no squeue here: no lifetime);
    the scratch folder goes in TMPDIR."""
    # 4 s without a claim: on a loaded machine the glide-in's first fetch can take more
    # than 2 s to claim the job waiting for it.
    env = env_for(redis_url, pool_name, job_tmp, STARTD_NOCLAIM_SHUTDOWN="4", NUM_SLOTS="1")
    del env["_FETCHWORK_GLIDEIN_SCRATCH"]
    env.update({"FETCHWORK": str(Path(sys.executable).parent / "fetchwork"),
                "TMPDIR": str(job_tmp), "FETCHWORK_BROKER_CA": "", "FETCHWORK_BROKER_CERT": "",
                "FETCHWORK_BROKER_KEY": "", "FETCHWORK_BROKER_USERNAME": "",
                "FETCHWORK_BROKER_PASSWORD_FILE": "", "SLURM_JOB_ID": "4242"})
    fw(env, "submit", "--", "/bin/true", cwd=job_tmp)
    wait_admitted(env, 1)
    script = Path(__file__).resolve().parents[2] / "deploy" / "glidein" / "glidein.slurm"
    done = subprocess.run(["bash", str(script)], env=env, cwd=job_tmp, capture_output=True,
                          text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("fetchwork glidein: ran 1 job(s)"), \
        done.stdout + "\n" + done.stderr[-4000:]
    assert "-4242" in done.stderr  # the slot names carry the batch job's id
    assert [ad["JobStatus"] for ad in jobs(env).values()] == [4]
    assert scratch_folders(job_tmp) == []


def test_a_lifetime_within_the_drain_time_is_refused_before_any_job(
        redis_url: str, pool_name: str, job_tmp: Path) -> None:
    """GLIDEIN_LIFETIME = 90 with the default GLIDEIN_DRAIN_TIME would drain at once and
    run nothing: the glide-in says so, naming both knobs, and takes no job."""
    env = env_for(redis_url, pool_name, job_tmp, GLIDEIN_LIFETIME="90", NUM_SLOTS="1")
    fw(env, "submit", "--", "/bin/true", cwd=job_tmp)
    done = subprocess.run([sys.executable, "-m", "fetchwork", "glidein"], env=env,
                          cwd=job_tmp, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GLIDEIN_LIFETIME = 90 s" in done.stderr and "GLIDEIN_DRAIN_TIME = 90 s" in done.stderr
    assert "run nothing" in done.stderr and done.stdout == ""
    job = jobs(env)["1.0"]
    assert job["JobStatus"] == 1 and not job.get("NumJobMatches"), job
    assert scratch_folders(job_tmp) == []
    fw(env, "rm", "-all")
