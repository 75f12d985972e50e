"""A glide-in's pure decisions (glidein/pilot.py) and cgroup readings (glidein/cgroups.py), without
processes: lifetimes, drain and no-claim times, the START clause, the summary, and
CPU and memory limits from cgroup v1 and v2 trees written into tmp_path."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest

from fetchwork.config.ads import as_bool, evaluate_attr
from fetchwork.errors import ConfigError
from fetchwork.startd.glidein import cgroups, pilot


@pytest.mark.parametrize(("text", "seconds"), [
    ("3600", 3600), ("90.5", 90.5), ("1:00:00", 3600), ("05:30", 330), ("2-00:00:00", 172800),
    ("1-02", 93600), ("1-02:03", 93780), ("UNLIMITED", None), ("", None)])
def test_walltime_forms(text: str, seconds: float | None) -> None:
    assert pilot.parse_walltime(text, "--lifetime") == seconds


def test_bad_walltime_names_its_source() -> None:
    with pytest.raises(ConfigError, match="GLIDEIN_LIFETIME = 'soon'"):
        pilot.parse_walltime("soon", "GLIDEIN_LIFETIME")


def test_lifetime_prefers_option_then_knob_then_batch_end() -> None:
    assert pilot.lifetime_s("60", "120", "5000", now_wall=1000) == 60
    assert pilot.lifetime_s("", "120", "5000", now_wall=1000) == 120
    assert pilot.lifetime_s("", "", "5000", now_wall=1000) == 4000
    assert pilot.lifetime_s("", "", "", now_wall=1000) is None


def test_drain_comes_before_the_end_and_no_claim_after_idle_time() -> None:
    plan = pilot.PilotPlan(started_at=100, lifetime_s=600, drain_s=90, noclaim_s=60)
    assert plan.drain_at == 610
    assert pilot.next_action(plan, now=150, last_claim_at=100) is None
    assert pilot.next_action(plan, now=160, last_claim_at=100) == pilot.NOCLAIM
    assert pilot.next_action(plan, now=600, last_claim_at=590) is None
    assert pilot.next_action(plan, now=610, last_claim_at=609) == pilot.DRAIN


def test_no_claim_waits_for_an_outstanding_fetch_but_drain_does_not() -> None:
    plan = pilot.PilotPlan(started_at=100, lifetime_s=600, drain_s=90, noclaim_s=60)
    assert pilot.next_action(plan, now=170, last_claim_at=100, fetching=True) is None
    assert pilot.next_action(plan, now=170, last_claim_at=100) == pilot.NOCLAIM
    assert pilot.next_action(plan, now=610, last_claim_at=100, fetching=True) == pilot.DRAIN


def test_no_lifetime_and_no_noclaim_never_stop() -> None:
    plan = pilot.PilotPlan(started_at=0, lifetime_s=None, drain_s=90, noclaim_s=None)
    assert pilot.next_action(plan, now=1e9, last_claim_at=0) is None
    assert pilot.fits_expression(None) == "true"


def fits(allowed: int | None, drain_at_wall: float) -> bool:
    slot = classad2.ClassAd()
    slot["Start"] = classad2.ExprTree(pilot.fits_expression(drain_at_wall))
    job = classad2.ClassAd()
    if allowed is not None:
        job["AllowedJobDuration"] = allowed
    return as_bool(evaluate_attr(slot, "Start", job))


def test_start_clause_refuses_jobs_that_outlast_the_drain() -> None:
    import time

    drain_at = time.time() + 600
    assert fits(None, drain_at)
    assert fits(300, drain_at)
    assert not fits(3600, drain_at)


def test_summary_line() -> None:
    line = pilot.summary(jobs_run=3, busy_s=30, alive_s=60, slots=2, why="no claim for 5s")
    assert line == ("fetchwork glidein: ran 3 job(s); slots busy 30s of 60s x 2 slot(s) (25%); "
                    "stopped: no claim for 5s")


# -- cgroups -------------------------------------------------------------------------


def test_cgroup_parsers() -> None:
    assert cgroups.parse_cpu_max("250000 100000\n") == 2.5
    assert cgroups.parse_cpu_max("max 100000") is None
    assert cgroups.parse_cfs("-1", "100000") is None
    assert cgroups.parse_cfs("50000", "100000") == 0.5
    assert cgroups.parse_memory_bytes("max\n") is None
    assert cgroups.parse_memory_bytes("9223372036854771712") is None
    assert cgroups.parse_memory_bytes("2147483648") == 2147483648


def write(path: Path, text: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for line in text.splitlines():
        name, value = line.split("=", 1)
        (path / name).write_text(value + "\n")


def test_v2_limits_take_the_smallest_along_the_path(tmp_path: Path) -> None:
    write(tmp_path / "slurm", "cpu.max=400000 100000\nmemory.max=8589934592")
    write(tmp_path / "slurm" / "job_7", "cpu.max=max 100000\nmemory.max=1073741824")
    paths = cgroups.cgroup_paths("0::/slurm/job_7\n")
    assert cgroups.cgroup_cpus(tmp_path, paths) == 4.0
    assert cgroups.cgroup_memory_bytes(tmp_path, paths) == 1073741824


def test_v1_limits_and_a_path_missing_inside_a_container(tmp_path: Path) -> None:
    write(tmp_path / "cpu", "cpu.cfs_quota_us=150000\ncpu.cfs_period_us=100000")
    write(tmp_path / "memory", "memory.limit_in_bytes=536870912")
    paths = cgroups.cgroup_paths("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n")
    assert cgroups.cgroup_cpus(tmp_path, paths) == 1.5
    assert cgroups.cgroup_memory_bytes(tmp_path, paths) == 536870912


def test_limits_of_this_process_are_sane() -> None:
    found = cgroups.limits()
    assert found.cpus >= 1
    assert found.memory_mb is None or found.memory_mb > 0


def test_a_lifetime_within_the_drain_time_is_refused_naming_both_knobs() -> None:
    with pytest.raises(ConfigError) as caught:
        pilot.check_drain(90.0, 90.0, pilot.lifetime_source("", "90"))
    assert "GLIDEIN_LIFETIME = 90 s" in str(caught.value)
    assert "GLIDEIN_DRAIN_TIME = 90 s" in str(caught.value)
    with pytest.raises(ConfigError, match="--lifetime = 30 s"):
        pilot.check_drain(30.0, 90.0, pilot.lifetime_source("30", "3600"))
    pilot.check_drain(91.0, 90.0, "GLIDEIN_LIFETIME")
    pilot.check_drain(None, 90.0, "GLIDEIN_LIFETIME")
