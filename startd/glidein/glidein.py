"""A glide-in: a startd that lives inside another batch system's job.

It makes a scratch folder inside the batch job's (its state, execute and log
folders), removed at exit; writes there the packaged pool.conf (the
reference hooks) and a configuration file that includes the site's and adds
to START that a job's AllowedJobDuration must end before the drain; sizes
the slots from the cgroup limits the batch system set; then runs a startd
whose loop also applies the pilot's plan (glidein/pilot.py; a lifetime no longer
than the drain time is refused before anything starts): a graceful shutdown,
which evicts running jobs back to the queue, when the drain time comes or
after STARTD_NOCLAIM_SHUTDOWN seconds without a claim. Every connection is
the hooks' outbound one to the pool's Redis.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from fetchwork.config.loader import DEFAULTS_FILE, POOL_FILE, Config
from fetchwork.errors import ConfigError
from fetchwork.startd.daemon import Startd

from . import cgroups, pilot

log = logging.getLogger(__name__)

POOL_TEMPLATE = Path(DEFAULTS_FILE).with_name("pool.conf")
GLIDEIN_CONF = "glidein.conf"
SITE_CONFIG = "/etc/fetchwork/fetchwork.conf"
PATH_VARIABLES = ("FETCHWORK_BROKER_CA", "FETCHWORK_BROKER_CERT", "FETCHWORK_BROKER_KEY",
                  "FETCHWORK_BROKER_PASSWORD_FILE")
WHY = {pilot.DRAIN: "lifetime ends (drained)", pilot.NOCLAIM: "no claim"}


class GlideinStartd(Startd):
    """A startd whose loop also follows a PilotPlan."""

    def __init__(self, config: Config, plan: pilot.PilotPlan, name: str | None = None):
        super().__init__(config, name=name)
        self.plan = plan
        self.last_claim_at = plan.started_at
        self.stopped_why = "signal"

    def _tick(self, now: float) -> None:
        if any(slot.claim or slot.starter or slot.pending for slot in self.slots):
            self.last_claim_at = now
        if self.shutdown_plan is None:
            fetching = any(slot.clock.outstanding for slot in self.slots)
            action = pilot.next_action(self.plan, now, self.last_claim_at, fetching)
            if action is not None:
                self.stopped_why = WHY[action]
                if action == pilot.NOCLAIM:
                    self.stopped_why += f" for {self.plan.noclaim_s:g}s"
                self.shutdown(fast=False, now=now, why=self.stopped_why)
        super()._tick(now)


def absolute_paths(environ: MutableMapping[str, str]) -> None:
    """Make the file knobs of the connection absolute (a batch system hands them over
    relative to the job's folder, and starters work in other folders)."""
    for name in PATH_VARIABLES:
        value = environ.get(name, "")
        if value and not os.path.isabs(value):
            environ[name] = os.path.abspath(value)


def scratch_parent(config: Config) -> str:
    """GLIDEIN_SCRATCH, else the batch job's scratch (HTCondor's _CONDOR_SCRATCH_DIR,
    TMPDIR), else the current folder."""
    chosen = (config.get("GLIDEIN_SCRATCH") or "").strip()
    return chosen or os.environ.get("_CONDOR_SCRATCH_DIR") or os.environ.get("TMPDIR") or "."


def write_configuration(scratch: Path, fits: str) -> str:
    """The glide-in's configuration file: the site's (if any), then the fit in START."""
    site = os.environ.get("FETCHWORK_CONFIG") or (
        SITE_CONFIG if os.path.isfile(SITE_CONFIG) else "")
    lines = ["# Written by fetchwork glidein; removed when it exits."]
    if site:
        lines.append(f"include : {os.path.abspath(site)}")
    lines.append(f"START = ($(START)) && {fits}")
    # A glide-in shares no file system with anyone: its own FileSystemDomain, so jobs
    # with should_transfer_files = IF_NEEDED transfer their files (unless the site set one).
    lines.append(f"FILESYSTEM_DOMAIN = $(FILESYSTEM_DOMAIN:{scratch.name})")
    path = scratch / GLIDEIN_CONF
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@dataclass
class Glidein:
    """One glide-in run: set up, run the startd, summarise, clean up."""

    lifetime: str = ""
    name: str | None = None
    scratch: Path | None = None

    def prepare(self) -> tuple[Config, pilot.PilotPlan]:
        """Make the scratch folder and this process's environment; the plan."""
        base = Config.load()
        if not (base.get("FETCHWORK_BROKER") or "").strip():
            raise ConfigError("a glide-in needs FETCHWORK_BROKER: the pool's Redis URL "
                              "(it never runs a Redis of its own)")
        absolute_paths(os.environ)
        now, wall = time.monotonic(), time.time()
        life_s = pilot.lifetime_s(self.lifetime, base.get("GLIDEIN_LIFETIME") or "",
                                  os.environ.get("SLURM_JOB_END_TIME", ""), wall)
        noclaim = base.get_duration_s("STARTD_NOCLAIM_SHUTDOWN")
        pilot.check_drain(life_s, base.get_duration_s("GLIDEIN_DRAIN_TIME"),
                          pilot.lifetime_source(self.lifetime,
                                                base.get("GLIDEIN_LIFETIME") or ""))
        plan = pilot.PilotPlan(now, life_s, base.get_duration_s("GLIDEIN_DRAIN_TIME"),
                               noclaim if noclaim > 0 else None)
        self.scratch = Path(tempfile.mkdtemp(prefix="fetchwork-glidein-",
                                             dir=scratch_parent(base))).absolute()
        self.scratch.chmod(0o755)  # a root glide-in's jobs run as SLOT_USER
        shutil.copyfile(POOL_TEMPLATE, self.scratch / POOL_FILE)
        drain_wall = None if plan.drain_at is None else wall + (plan.drain_at - now)
        found = cgroups.limits()
        os.environ.update({
            "FETCHWORK_STATE_DIR": str(self.scratch),
            "FETCHWORK_CONFIG": write_configuration(self.scratch,
                                                    pilot.fits_expression(drain_wall)),
            "_FETCHWORK_LOG": str(self.scratch / "log"),
            "_FETCHWORK_EXECUTE": str(self.scratch / "execute"),
            "_FETCHWORK_DETECTED_CPUS": str(found.cpus),
        })
        if found.memory_mb is not None:
            machine_mb = base.get_int("DETECTED_MEMORY")
            os.environ["_FETCHWORK_DETECTED_MEMORY"] = str(min(found.memory_mb, machine_mb))
        return Config.load(), plan

    def run(self) -> tuple[int, str]:
        """Run to the end; (exit status, summary line)."""
        started = time.monotonic()
        try:
            config, plan = self.prepare()
            startd = GlideinStartd(config, plan, name=self.name)
            log.info("glide-in in %s: %d slot(s), lifetime %s, no-claim shutdown %s",
                     self.scratch, len(startd.slots),
                     "none" if plan.lifetime_s is None else f"{plan.lifetime_s:g}s",
                     "never" if plan.noclaim_s is None else f"{plan.noclaim_s:g}s")
            status = startd.run()
            # Counted as the starters said their jobs started (starters/ledger.py).
            ledger, now = startd.starters.ledger, time.monotonic()
            return status, pilot.summary(ledger.jobs_run, ledger.busy_s(now),
                                         now - started, len(startd.slots),
                                         startd.stopped_why)
        finally:
            self.clean()

    def clean(self) -> None:
        if self.scratch is not None and self.scratch.exists():
            shutil.rmtree(self.scratch, ignore_errors=True)
