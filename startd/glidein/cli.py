"""`fetchwork glidein`: a startd for one batch job of another batch system."""

from __future__ import annotations

import logging

import click


@click.command("glidein")
@click.option("--lifetime", default="", metavar="TIME",
              help="How long the glide-in may live: seconds, HH:MM:SS or D-HH:MM:SS (Slurm's "
                   "time left). Default: GLIDEIN_LIFETIME, else SLURM_JOB_END_TIME, else "
                   "no end.")
@click.option("--name", help="Machine name in slot names (slot<N>@NAME); default: this host.")
def glidein_command(lifetime: str, name: str | None) -> None:
    """Join a pool from inside another batch system's job (a pilot).

    Runs a startd whose only connections are outbound, to the pool's Redis
    (FETCHWORK_BROKER, with FETCHWORK_BROKER_CA/_CERT/_KEY and the execute
    role's FETCHWORK_BROKER_USERNAME and FETCHWORK_BROKER_PASSWORD_FILE).
    Its slots share the CPUs and memory the batch job was given (cgroup
    limits), and its state lives in a scratch folder inside the batch job's
    (GLIDEIN_SCRATCH, _CONDOR_SCRATCH_DIR or TMPDIR), removed at exit.

    \b
    It takes no job whose AllowedJobDuration ends after its drain time;
    GLIDEIN_DRAIN_TIME seconds before its lifetime ends it evicts running
    jobs back to the queue and exits; it exits after STARTD_NOCLAIM_SHUTDOWN
    seconds without a claim; SIGTERM drains it at once. A lifetime no longer
    than GLIDEIN_DRAIN_TIME is refused (exit 1): it would run nothing.

    It prints one summary line (jobs run, time busy, why it stopped) and
    exits 0 after a clean stop.
    """
    from .glidein import Glidein

    root = logging.getLogger()
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    status, line = Glidein(lifetime=lifetime, name=name).run()
    click.echo(line)
    raise SystemExit(status)
