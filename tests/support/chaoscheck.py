"""What a chaos run must show, decided from its records alone (pure).

The records: each run of a job as the job itself logged it (its claim token,
the starter's pid, its startd's pid, start and end times), every SIGKILL the
harness sent, and the queue's own view (each job's final JobStatus, the
times of its COMPLETED and reap events). The rules:

- every submitted job is in the history as COMPLETED, and reached COMPLETED
  exactly once in the event stream; nothing submitted is missing;
- two runs of one job overlap in time only when the first one's lease had
  lapsed (a reap of that job between the two starts);
- no run starts after the job's completion in the queue;
- a run that reached its end (the job finished) is not followed by another
  run, unless its starter or its startd was SIGKILLed as that run ended
  (the moments between the job's exit and its outcome reaching the disk,
  or a vacate racing the job's exit): those are counted apart.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# A kill this long before a run's end may still have ended it as evicted
# (the job had logged its end but not yet exited when it was told to vacate).
VACATE_RACE_S = 1.0
# A starter killed later than this after its job's end had the outcome on
# disk already (milliseconds after the end; seconds on a loaded machine).
EXIT_WINDOW_S = 2.0


@dataclass(frozen=True)
class Run:
    job: str
    token: str
    starter_pid: int
    startd_pid: int
    start: float
    end: float | None = None


@dataclass(frozen=True)
class Kill:
    at: float
    kind: str
    pid: int


@dataclass(frozen=True)
class QueueView:
    """The queue's account: final JobStatus by job, COMPLETED event times, reap times."""

    status: Mapping[str, int]
    completed_at: Mapping[str, Sequence[float]]
    reaped_at: Mapping[str, Sequence[float]]


@dataclass
class Report:
    jobs: int
    kills: Counter[str]
    runs: int
    reruns: int
    excused_reruns: int
    worst_requeue_s: float
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kills = ", ".join(f"{kind} {n}" for kind, n in sorted(self.kills.items())) or "none"
        return (f"chaos: {self.jobs} jobs, {self.runs} runs, {self.reruns} reruns "
                f"({self.excused_reruns} after a run whose starter or startd was killed as it "
                f"ended), kills: {kills}; worst requeue delay {self.worst_requeue_s:.1f}s; "
                f"{len(self.problems)} problem(s)")


def parse_runs(text: str) -> list[Run]:
    """Runs from the jobs' log lines: `start JOB TOKEN STARTER STARTD T` and
    `end JOB TOKEN STARTER STARTD T` (lines cut short by a kill are skipped)."""
    starts: dict[str, Run] = {}
    ends: dict[str, float] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) != 6 or words[0] not in ("start", "end"):
            continue
        try:
            run = Run(words[1], words[2], int(words[3]), int(words[4]), float(words[5]))
        except ValueError:
            continue
        if words[0] == "start":
            starts[run.token] = run
        else:
            ends[run.token] = run.start
    return [Run(r.job, r.token, r.starter_pid, r.startd_pid, r.start, ends.get(r.token))
            for r in starts.values()]


def check(submitted: Sequence[str], runs: Sequence[Run], kills: Sequence[Kill],
          queue: QueueView) -> Report:
    """The report of a chaos run: counts, and every rule broken (pure)."""
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_job[run.job].append(run)
    report = Report(jobs=len(submitted), kills=Counter(kill.kind for kill in kills),
                    runs=len(runs), reruns=0, excused_reruns=0, worst_requeue_s=0.0)
    for job in submitted:
        _check_queue(job, queue, report)
        job_runs = sorted(by_job.get(job, []), key=lambda run: run.start)
        if not job_runs:
            report.problems.append(f"job {job} never ran")
            continue
        report.reruns += len(job_runs) - 1
        for first, second in zip(job_runs, job_runs[1:], strict=False):
            _check_pair(job, first, second, kills, queue, report)
        done = queue.completed_at.get(job, ())
        for run in job_runs:
            if done and run.start > min(done):
                report.problems.append(f"job {job}: run {run.token} started after the job "
                                       "completed")
    for job in set(by_job) - set(submitted):
        report.problems.append(f"job {job} ran but was not submitted by this run")
    return report


def _check_queue(job: str, queue: QueueView, report: Report) -> None:
    status = queue.status.get(job)
    if status is None:
        report.problems.append(f"job {job} is missing from the queue and the history")
    elif status != 4:
        report.problems.append(f"job {job} ended with JobStatus {status}, not 4 (Completed)")
    times = len(queue.completed_at.get(job, ()))
    if times != 1:
        report.problems.append(f"job {job} reached COMPLETED {times} times")


def _check_pair(job: str, first: Run, second: Run, kills: Sequence[Kill], queue: QueueView,
                report: Report) -> None:
    reaped = any(first.start <= at <= second.start for at in queue.reaped_at.get(job, ()))
    if first.end is not None and second.start < first.end and not reaped:
        report.problems.append(f"job {job}: runs {first.token} and {second.token} overlapped "
                               "while the first one's lease held")
    if first.end is not None:
        if _killed_as_it_ended(first, kills):
            report.excused_reruns += 1
        else:
            report.problems.append(f"job {job}: run {first.token} finished at {first.end:.3f} "
                                   f"and the job ran again ({second.token})")
    ended = first.end if first.end is not None else _interrupted_at(first, kills)
    if ended is not None:
        report.worst_requeue_s = max(report.worst_requeue_s, second.start - ended)


def _killed_as_it_ended(run: Run, kills: Sequence[Kill]) -> bool:
    assert run.end is not None
    for kill in kills:
        if kill.kind == "starter" and kill.pid == run.starter_pid \
                and run.end <= kill.at <= run.end + EXIT_WINDOW_S:
            return True
        if kill.kind == "startd" and kill.pid == run.startd_pid \
                and run.end - VACATE_RACE_S <= kill.at <= run.end + EXIT_WINDOW_S:
            return True
    return False


def _interrupted_at(run: Run, kills: Sequence[Kill]) -> float | None:
    """When a run that never ended was cut short: the first kill of its starter or
    startd after its start, else the first kill of anything after it."""
    after = [kill for kill in kills if kill.at >= run.start]
    own = [kill.at for kill in after if (kill.kind, kill.pid) in
           (("starter", run.starter_pid), ("startd", run.startd_pid))]
    if own:
        return min(own)
    return min((kill.at for kill in after), default=None)
