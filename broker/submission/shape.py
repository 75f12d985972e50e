"""Shaping a submission for staging, once per distinct ad: big submissions are alike.

A big submission is mostly copies of one ad (`queue 1000`, a parameter
sweep's common part). An ad equal to the one before it is not prepared,
grouped and packed again: its jobs copy the prepared attributes, share the
autocluster (unless what a match reads of them names a per-job attribute),
and reuse the packed fields; per job only the attributes that name and place
it (jobads.identity) are packed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import classad2

from fetchwork.broker.autoclusters import Grouper, rep_entry, significant_names
from fetchwork.broker.dependencies.graph import DEPENDS_ATTR
from fetchwork.broker.jobpolicy.expressions import has_periodic
from fetchwork.broker.store import codec
from fetchwork.broker.store.acmembers import AUTOCLUSTER_ATTR
from fetchwork.broker.store.jobads import PreparedJob, prepare_submitted
from fetchwork.broker.store.states import idle_order
from fetchwork.config.signedjob import SIGNATURE_ATTR

# What differs between two jobs of one submission made from equal ads
# (jobads.identity: the rest of identity and place is the same for them).
PROC, GLOBAL, ORDER = PER_JOB = ("ProcId", "GlobalJobId", "FetchworkOrder")
# In the cluster ad (lua/jobad.lua): GlobalJobId's text before and after the job id,
# and FetchworkOrder less the job's sequence (states.idle_order of its JobPrio).
CLUSTER_GJID, CLUSTER_ORDER = "#gjid", "#order"
_PER_JOB_LOWER = frozenset(name.lower() for name in PER_JOB)
_DEPENDS_LOWER = DEPENDS_ATTR.lower()



class SubmitGroups:
    """Autoclusters of one submission: each job's id, and the entries to write once."""

    def __init__(self) -> None:
        self.grouper = Grouper()
        self._entries: dict[str, bytes] = {}

    def assign(self, attrs: dict[str, Any]) -> str:
        """Set the job's FetchworkAutocluster (in `attrs`) and return it."""
        gid = self.grouper.gid(attrs)
        attrs[AUTOCLUSTER_ATTR] = gid
        return gid

    def entries(self, gids: Iterable[str]) -> list[bytes | str]:
        """Flat [id, entry, ...] of `gids` (distinct, in first-seen order)."""
        flat: list[bytes | str] = []
        for gid in dict.fromkeys(gids):
            entry = self._entries.get(gid)
            if entry is None:
                entry = self._entries[gid] = rep_entry(self.grouper.reps[gid])
            flat += [gid, entry]
        return flat

class SubmissionShape:
    """The prepared jobs of one submission, then their autoclusters and packed fields."""

    def __init__(self, default_lease_s: float, default_exclusive: bool = False):
        self.default_lease_s = default_lease_s
        self.default_exclusive = default_exclusive  # DEFAULT_JOB_EXCLUSIVE
        self.groups = SubmitGroups()
        # Index of the first job of each run of equal ads.
        self._run_starts: list[int] = []

    def any_depends(self, jobs: Sequence[PreparedJob]) -> bool:
        """Whether any job names Depends (asked of one job per run of equal ads)."""
        return any(name.lower() == _DEPENDS_LOWER
                   for start in self._run_starts for name in jobs[start].attrs)

    def periodic(self, jobs: Sequence[PreparedJob]) -> list[bool]:
        """jobpolicy.has_periodic of each job, asked of one job per run of equal ads
        (what a run's jobs do not share, PER_JOB and Depends, holds no periodic
        expression)."""
        flags: list[bool] = []
        bounds = [*self._run_starts, len(jobs)]
        for start, stop in zip(bounds, bounds[1:], strict=False):
            flags += [has_periodic(jobs[start].attrs)] * (stop - start)
        return flags

    def prepare(self, ads: Sequence[classad2.ClassAd | Mapping[str, Any]],
                qdate_s: int) -> list[PreparedJob]:
        """jobads.prepare_submitted of each ad, once per run of equal ads."""
        normalizer = codec.AdNormalizer()
        jobs: list[PreparedJob] = []
        last_ad: Any = None
        last_data: dict[str, Any] | None = None
        template: PreparedJob | None = None
        for ad in ads:
            data = (last_data if ad is last_ad and last_data is not None
                    else normalizer.normalize(ad))
            if template is None or data != last_data:
                prepared = prepare_submitted(data, qdate_s, self.default_lease_s,
                                             self.default_exclusive)
                template = PreparedJob(prepared.prio, prepared.held, dict(prepared.attrs),
                                       prepared.ad_owner)
                self._run_starts.append(len(jobs))
                jobs.append(prepared)
            else:
                jobs.append(PreparedJob(template.prio, template.held, dict(template.attrs),
                                        template.ad_owner))
            last_ad, last_data = ad, data
        return jobs

    def fields(self, jobs: Sequence[PreparedJob]) -> PackedJobs:
        """After jobads.place: each job's autocluster set, and its packed fields."""
        packer = codec.FieldPacker()
        own = codec.unique_packer()
        packed = PackedJobs()
        starts = set(self._run_starts)
        shared_gid: str | None = None
        around = ("", "")
        # A cluster ad pays for its own hash from two linked jobs on.
        first_run = (self._run_starts + [len(jobs)])[1] if self._run_starts else 0
        packed.linked = first_run > 1
        for index, job in enumerate(jobs):
            attrs = job.attrs
            if index in starts:
                names = {name.lower() for name in significant_names(attrs)}
                shared_gid = None if names & _PER_JOB_LOWER else self.groups.assign(attrs)
                common = {name: value for name, value in attrs.items()
                          if name not in PER_JOB and name not in (AUTOCLUSTER_ATTR,
                                                                  SIGNATURE_ATTR)}
                if shared_gid is not None:
                    common[AUTOCLUSTER_ATTR] = shared_gid
                packed.commons.append(packer.fields(common))
                if index == 0 and packed.linked:
                    around = global_id_around(job)
                    packed.commons[0] += [CLUSTER_GJID, "\n".join(around),
                                          CLUSTER_ORDER, str(idle_order(job.prio, 0))]
            # Unique per job: packed without the packer's cache of shared values.
            if packed.linked and len(packed.commons) == 1:
                # Linked to the cluster ad: ProcId, GlobalJobId and FetchworkOrder are
                # derived (lua/jobad.lua) unless they read otherwise.
                fields: list[bytes | str] = []
                if attrs[GLOBAL] != job.job_id.join(around):
                    fields += [GLOBAL, own(attrs[GLOBAL])]
                if job.prio != jobs[0].prio:
                    fields += [ORDER, own(attrs[ORDER])]
            else:
                fields = [PROC, own(attrs[PROC]), GLOBAL, own(attrs[GLOBAL]),
                          ORDER, own(attrs[ORDER])]
            if SIGNATURE_ATTR in attrs:  # signed as staged (the broker's own submissions)
                fields += [SIGNATURE_ATTR, own(attrs[SIGNATURE_ATTR])]
            if shared_gid is None:
                self.groups.assign(attrs)
                fields += [AUTOCLUSTER_ATTR, own(attrs[AUTOCLUSTER_ATTR])]
            else:
                attrs[AUTOCLUSTER_ATTR] = shared_gid
            packed.own.append(fields)
            packed.run_of.append(len(packed.commons) - 1)
        return packed


def global_id_around(job: PreparedJob) -> tuple[str, str]:
    """What job `job`'s GlobalJobId has before and after its id (jobads.identity:
    `<pool>#<id>#<QDate>`), for the cluster ad's CLUSTER_GJID."""
    global_id = str(job.attrs[GLOBAL])
    marked = f"#{job.job_id}#"
    at = global_id.rfind(marked)
    if at < 0:
        return global_id, ""  # no id inside: every linked job stores its own
    return global_id[:at + 1], global_id[at + len(marked) - 1:]


class PackedJobs:
    """Packed fields of a submission's jobs: per run of equal ads the fields its jobs
    share, per job its own."""

    def __init__(self) -> None:
        self.commons: list[list[bytes | str]] = []
        self.own: list[list[bytes | str]] = []
        self.run_of: list[int] = []
        # Whether the first run's jobs are linked to the cluster ad.
        self.linked = False

    def runs(self, start: int, stop: int) -> list[list[Any]]:
        """stage.lua's batch for jobs [start, stop): {shared fields, {own fields, ...},
        linked} per run, in job order. The first run's shared fields are the cluster
        ad (stored once, lua/jobad.lua) when it has two jobs or more; the other
        runs' jobs store theirs."""
        out: list[list[Any]] = []
        last = -1
        for index in range(start, stop):
            run = self.run_of[index]
            if run != last:
                out.append([self.commons[run], [], self.linked and run == 0])
                last = run
            out[-1][1].append(self.own[index])
        return out
