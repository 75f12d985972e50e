"""Queue snapshots for the policy tests: jobs and settings from knob text."""

from __future__ import annotations

from pathlib import Path

from fetchwork.broker.scheduling.eligibility import SchedulingPass
from fetchwork.broker.scheduling.settings import SchedulingSettings, scheduling_settings
from fetchwork.broker.scheduling.snapshot import QueuedJob
from fetchwork.broker.store.states import State
from fetchwork.config.loader import DEFAULTS_FILE, Config

ROOT = Path(__file__).resolve().parents[2]
HPC2N = ROOT / "config" / "examples" / "hpc2n.conf"
NOW = 1_300_000_000.0


def settings(text: str = "") -> SchedulingSettings:
    """The defaults, then `text` (knob lines), converted as the broker would."""
    defaults = Path(DEFAULTS_FILE).read_text(encoding="utf-8")
    return scheduling_settings(Config.from_text(defaults + "\n" + text, "<test>"))


def hpc2n() -> SchedulingSettings:
    return settings(HPC2N.read_text(encoding="utf-8"))


def job(number: int, owner: str = "user1", state: State = State.IDLE, cpus: int = 1,
        walltime_s: float = 3600.0, prio: int = 0, project: str | None = None,
        remaining_s: float | None = None, idle_for_s: float = 0.0, **more) -> QueuedJob:
    """Job `number`.0, submitted `number` seconds after an hour before NOW."""
    started = None
    if state in (State.RUNNING, State.SUSPENDED):
        started = NOW - (walltime_s - (remaining_s if remaining_s is not None else walltime_s))
    return QueuedJob(
        job_id=f"{number}.0", owner=owner, project=project, cpus=cpus, walltime_s=walltime_s,
        state=state, prio_group=prio, order=float(number), queued_at=NOW - 3600 + number,
        idle_since=NOW - idle_for_s if state is State.IDLE else None, started_at=started,
        **more)


def apply(jobs: list[QueuedJob], result: SchedulingPass) -> None:
    """What the broker does with a pass: each queued job takes its placement."""
    for one in jobs:
        placement = result.placements.get(one.job_id)
        if placement is not None:
            if placement.state is State.IDLE and one.state is not State.IDLE:
                one.idle_since = NOW
            one.state = placement.state
            one.blocked_reason = placement.reason
            one.soft_blocked = placement.soft


def states(jobs: list[QueuedJob]) -> dict[str, str]:
    return {one.job_id: one.state.value for one in jobs}
