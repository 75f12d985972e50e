"""`fetchwork.Schedd`: htcondor2's `Schedd` over a fetchwork pool.

A script written for htcondor2 runs after changing `htcondor2.Schedd()` to
`fetchwork.Schedd()`: the methods keep htcondor2's names, arguments and
return types (`submit` returns an object with `cluster()`, `first_proc()`,
`num_procs()`; `query` and `history` lists of `classad2.ClassAd`; `act` a
ClassAd of HTCondor's counts; `edit` the number of jobs edited). Each call
goes the way of the matching command: `submit` through the command line's
submit path (submit/submitting.py), `query` and `history` through its
readers (submit/reading.py), `act` and `edit` through `Broker.select` and
one Lua script per batch. Errors are `fetchwork.errors` exceptions with the
command line's messages; a Redis error never escapes raw.

`Schedd()` finds the pool as the command line does (FETCHWORK_BROKER, else
the embedded Redis of the state directory, started when none runs);
`Schedd(url)` names the broker's Redis URL instead.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import classad2
import htcondor2
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.ads import as_bool, evaluate, from_dict, parse_expr, to_dict
from fetchwork.config.loader import Config
from fetchwork.config.protocol import JobStatus, job_id_key
from fetchwork.description import DEFAULT_ITEMDATA, Description, ItemData, submit_text
from fetchwork.errors import (
    BrokerError,
    FetchworkError,
    JobActionError,
    NoMatchingJobsError,
    RedisUnavailableError,
    SubmissionFilteredError,
    TransferError,
)
from fetchwork.jobspec import Constraint, JobSpec, JobSpecLike, constraint_text, job_spec
from fetchwork.submit import reading
from fetchwork.submit.rootwarning import root_warning
from fetchwork.submit.submitfile import parse_submit
from fetchwork.submit.submitting import (
    await_verdicts,
    max_job_attrs,
    queue_description,
    waits_for_verdict,
)
from fetchwork.submit.transfercli import jobs_named
from fetchwork.submit.userlogsync import await_logged
from fetchwork.transfer import delivery, personupload

log = logging.getLogger(__name__)

# HTCondor's reason for an action the Python bindings took without one.
DEFAULT_REASON = "Python-initiated action"

# JobAction -> Broker.apply's action. Vacate stops a running job, which runs
# again: fetchwork's requeue. The others are refused (REFUSED says why).
ACTIONS = {"hold": "hold", "release": "release", "remove": "remove", "vacate": "requeue"}
REFUSED = {
    "removex": "RemoveX (forgetting a job being removed without its startd's word) is not "
               "done by fetchwork: a running job marked for removal leaves the queue when "
               "its startd stops it, or when its lease lapses",
    "vacatefast": "VacateFast is not done by fetchwork: a vacated job gets its "
                  "MachineMaxVacateTime; use JobAction.Vacate",
    "suspend": "Suspend is not a user action in fetchwork: a slot's SUSPEND expression "
               "suspends jobs",
    "continue": "Continue is not a user action in fetchwork: a slot's CONTINUE expression "
                "resumes jobs",
}

# The counts of HTCondor's act() result ad.
COUNTS = ("TotalError", "TotalSuccess", "TotalNotFound", "TotalBadStatus", "TotalAlreadyDone",
          "TotalPermissionDenied", "TotalJobAds", "TotalChangedAds")


class SubmitResult:
    """What `Schedd.submit` queued, as htcondor2's SubmitResult tells it."""

    def __init__(self, cluster: int, first_proc: int, num_procs: int,
                 ads: Sequence[Mapping[str, Any]]):
        self._cluster = cluster
        self._first_proc = first_proc
        self._num_procs = num_procs
        self._ads = list(ads)

    def cluster(self) -> int:
        """The cluster id of the submitted jobs."""
        return self._cluster

    def first_proc(self) -> int:
        """The first proc id of the submitted jobs."""
        return self._first_proc

    def num_procs(self) -> int:
        """The number of submitted jobs."""
        return self._num_procs

    def clusterad(self) -> classad2.ClassAd:
        """The attributes every submitted job shares, with ClusterId (the cluster ad)."""
        shared: dict[str, Any] = dict(self._ads[0]) if self._ads else {}
        for ad in self._ads[1:]:
            shared = {name: value for name, value in shared.items() if ad.get(name) == value}
        shared.pop("ProcId", None)
        return from_dict({**shared, "ClusterId": self._cluster})

    def procad(self, proc: int | None = None) -> classad2.ClassAd:
        """The ad of one submitted job (default the first) as submitted."""
        index = (proc if proc is not None else self._first_proc) - self._first_proc
        if not 0 <= index < len(self._ads):
            raise IndexError(f"cluster {self._cluster} has no proc {proc}")
        return from_dict({**self._ads[index], "ClusterId": self._cluster,
                          "ProcId": self._first_proc + index})

    def __int__(self) -> int:
        return self._cluster

    def __str__(self) -> str:
        return f"Submitted {self._num_procs} jobs into cluster {self._cluster}"

    def __repr__(self) -> str:
        return (f"SubmitResult(cluster={self._cluster}, first_proc={self._first_proc}, "
                f"num_procs={self._num_procs})")


def _filtered(result: SubmitResult, failed: Mapping[str, str]) -> SubmissionFilteredError:
    """The error for jobs of `result` the pool's submission filters failed."""
    shown = "; ".join(f"Job {job} failed: {failed[job]}"
                      for job in sorted(failed, key=job_id_key)[:10])
    more = f"; and {len(failed) - 10} more" if len(failed) > 10 else ""
    return SubmissionFilteredError(
        f"{len(failed)} of {result.num_procs()} job(s) of cluster {result.cluster()} failed "
        f"the pool's submission filters: {shown}{more}", result, failed)


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Redis errors as fetchwork's: an unreachable server, or a refused request."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailableError(f"lost the broker's Redis: {exc}") from exc
    except redis.RedisError as exc:
        raise BrokerError(f"the broker's Redis refused the request: {exc}") from exc


class Schedd:
    """The queue of one fetchwork pool, with htcondor2.Schedd's methods.

    `location`: the broker's Redis URL (redis://, rediss://, unix://, or a
    Sentinel URL); None finds the pool as the command line does. `pool`
    names the pool (default FETCHWORK_POOL). `config` replaces the
    configuration read from FETCHWORK_CONFIG and the environment.
    """

    def __init__(self, location: str | None = None, *, pool: str | None = None,
                 config: Config | None = None):
        if location is not None and not isinstance(location, str):
            raise TypeError("fetchwork.Schedd takes the broker's Redis URL (or nothing), "
                            f"not a {type(location).__name__}: there is no collector to "
                            "locate a schedd with")
        config = config if config is not None else Config.load()
        values: dict[str, object] = {}
        if location is not None:
            values["FETCHWORK_BROKER"] = location
        if pool is not None:
            values["FETCHWORK_POOL"] = pool
        self._config = config.with_values(**values) if values else config
        with _translated():
            _start_embedded(self._config)
            self._broker = Broker.from_config(self._config)

    @property
    def broker(self) -> Broker:
        """The pool's Broker (fetchwork's own API, below this one)."""
        return self._broker

    # -- submit ------------------------------------------------------------------------

    def submit(self, description: Description, count: int = 0, spool: bool = False,
               itemdata: ItemData = DEFAULT_ITEMDATA, queue: str | None = None) -> SubmitResult:
        """Queue the jobs of `description` (an htcondor2.Submit, a dict of submit commands
        or submit text) as one new cluster, as `fetchwork submit` does.

        `count` (when not 0) replaces the queue statement's count; `itemdata`
        (an iterable of strings or of dicts) its items; `queue` the whole
        statement. The description's warnings are issued as Python warnings,
        as htcondor2 does. When the pool has submission filters, the call
        returns after their verdict; jobs they failed raise
        SubmissionFilteredError (the others stay queued). A pool whose broker
        service never published its rules keeps the jobs waiting for it (a
        logged warning says so); the pool's rules refuse a job with SubmitError.
        The inputs of jobs that transfer files are sent with them; `spool=True`
        (`fetchwork submit -spool`) keeps their outputs in the pool until
        `retrieve` fetches them.
        """
        text = submit_text(description, count, itemdata, queue)
        submit_dir, owner = os.getcwd(), getpass.getuser()
        broker = self._broker
        with _translated():
            since_event = broker.last_event_id()
            max_attrs = max_job_attrs(broker)  # the pool's, not this machine's
            queued = queue_description(
                broker, lambda cluster: parse_submit(text, cluster, submit_dir=submit_dir,
                                                     source="<submit description>",
                                                     max_attrs=max_attrs),
                owner, _warn, spool=spool)
            await_logged(broker, queued.user_logs)
            ids = queued.submitted.job_ids
            failed = (await_verdicts(broker, ids, since_event)
                      if waits_for_verdict(broker, queued.submitted) else {})
            if queued.submitted.unpublished:
                log.warning("the pool's broker service has not published the pool's rules "
                            "yet: the %d job(s) wait (VALIDATING) until it admits them", len(ids))
        first = min((job_id_key(job)[1] for job in ids), default=0)
        result = SubmitResult(queued.cluster, first, len(ids), queued.ads)
        log.info("%d job(s) submitted to cluster %d", len(ids), queued.cluster)
        as_root = root_warning(owner, os.geteuid())
        if as_root is not None:  # logged: a fact of the caller's account, not of the text
            log.warning("%s", as_root)
        if failed:
            raise _filtered(result, failed)
        return result

    def spool(self, result: SubmitResult) -> None:
        """Nothing left to do: unlike HTCondor's schedd, fetchwork sends a job's input
        files with `submit` itself (all or nothing), so a spooled submission's inputs
        are already in the pool. Kept so that htcondor2 scripts run unchanged."""
        if not isinstance(result, SubmitResult):
            raise TypeError(f"result must be the SubmitResult of submit(), not "
                            f"{type(result).__name__}")

    def retrieve(self, job_spec: JobSpecLike) -> None:
        """Write the outputs kept in the pool for the jobs of `job_spec` (ids, a
        cluster, or a constraint over queued and finished jobs) into each job's Iwd,
        as `fetchwork transfer-data` does. A job whose outputs were already
        delivered, or that has none, is passed over; a failed delivery raises
        TransferError naming the jobs."""
        spec = _spec(job_spec)
        failures: list[str] = []
        with _translated():
            person = self._broker.person()  # a person's outputs come through the leader
            for job in self._ended_and_queued(spec):
                ad = self._broker.get(job)
                if ad is None:
                    continue
                try:
                    if person is not None:
                        personupload.deliver(self._broker, person, job, to_dict(ad))
                    else:
                        delivery.deliver(self._broker.store, job, to_dict(ad))
                except (TransferError, BrokerError) as exc:
                    failures.append(f"job {job}: {exc}")
        if failures:
            raise TransferError("outputs not delivered: " + "; ".join(failures))

    def _ended_and_queued(self, spec: JobSpec) -> list[str]:
        if spec.ids:
            return jobs_named(self._broker, list(spec.ids))
        ids = ["ClusterId", "ProcId"]
        ads = self.query(spec.constraint or "true", ids) + \
            self.history(spec.constraint, ids)
        return sorted({f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads}, key=job_id_key)

    # -- reading -------------------------------------------------------------------------

    def query(self, constraint: Constraint = "true", projection: Sequence[str] = (),
              callback: Callable[[classad2.ClassAd], Any] | None = None, limit: int = -1,
              opts: Any = None) -> list[Any]:
        """The ads of the jobs in the queue for which `constraint` is true (evaluated as
        `fetchwork q -constraint` does), in id order; only the `projection` attributes
        when it names any; at most `limit` (-1: all). `callback`, as in htcondor2,
        replaces each ad by what it returns (None drops the ad). `opts` must be
        QueryOpt.Default (or None)."""
        _default_opts(opts)
        text = constraint_text(constraint)
        names = _projection(projection)
        with _translated():
            rows = reading.queue_jobs(self._broker, (), text, names or None)
        ads = [_projected(row, names) for row in rows]
        return _limited(_called(ads, callback), limit)

    def history(self, constraint: Constraint | None = None, projection: Sequence[str] = (),
                match: int = -1, since: int | str | classad2.ExprTree | None = None
                ) -> list[classad2.ClassAd]:
        """Finished jobs (completed, removed, failed) for which `constraint` is true,
        newest first, at most `match` (-1: all). `since`, as in htcondor2: a cluster id
        (int) or job id ("12.3") stops before that job; an expression stops before the
        first job for which it is true."""
        text = constraint_text(constraint)
        names = _projection(projection)
        limit = match if match > 0 else None
        stop = _since(since)
        with _translated():
            if stop is None:
                rows = reading.history_jobs(self._broker, (), text, limit, names or None)
            else:
                rows = _until(reading.history_jobs(self._broker, (), text, None,
                                                   None), stop)
                rows = rows[:limit] if limit is not None else rows
        return [_projected(row, names) for row in rows]

    # -- acting on jobs ------------------------------------------------------------------

    def act(self, action: htcondor2.JobAction | str, job_spec: JobSpecLike,
            reason: str | tuple[str, Any] | None = None) -> classad2.ClassAd:
        """Hold, release, remove or vacate the jobs of `job_spec` (an id "12.0", a
        cluster "12" or 12, a list of ids, or a constraint) as `fetchwork hold`,
        `release`, `rm` and `requeue` do; `action` an htcondor2.JobAction or its name.
        Returns HTCondor's counts: TotalSuccess, TotalNotFound (ids not in the
        queue), TotalBadStatus (jobs the action does not apply to), TotalAlreadyDone,
        TotalPermissionDenied, TotalError, TotalJobAds (the queued jobs it named) and
        TotalChangedAds (the jobs changed)."""
        verb = _action(action)
        spec = _spec(job_spec)
        text = reason[0] if isinstance(reason, tuple) else reason
        with _translated():
            selected = self._select(spec)
            done = self._broker.apply(verb, selected, text or DEFAULT_REASON) if selected else []
            changed = set(done)
            left = [job for job in selected if job not in changed]
            already = self._already_done(verb, left)
        queued = set(selected)
        counts = dict.fromkeys(COUNTS, 0)
        counts["TotalSuccess"] = counts["TotalChangedAds"] = len(done)
        counts["TotalNotFound"] = sum(1 for job in spec.named_jobs() if job not in queued)
        counts["TotalAlreadyDone"] = already
        counts["TotalBadStatus"] = len(left) - already
        counts["TotalJobAds"] = len(selected)
        result = classad2.ClassAd()
        for name, value in counts.items():
            result[name] = value
        return result

    def edit(self, job_spec: JobSpecLike, attr: str, value: str | classad2.ExprTree,
             flags: Any = None) -> int:
        """Set attribute `attr` of the jobs of `job_spec` to `value` (ClassAd expression
        text: `'"text"'` for a string, `"10"`, or an ExprTree), as condor_qedit does;
        the number of jobs edited. Attributes a user may not change are refused
        (EditError) whatever the jobs. Ids that name no job in the queue raise
        NoMatchingJobsError; a constraint that matches nothing edits 0 jobs. `flags`
        is accepted for htcondor2's signature: every edit here is durable at once."""
        spec = _spec(job_spec)
        if not isinstance(attr, str):
            raise TypeError(f"attr must be a string, not {type(attr).__name__}")
        if not isinstance(value, str | classad2.ExprTree):
            raise TypeError("value must be ClassAd expression text or a classad2.ExprTree, "
                            f"not {type(value).__name__}")
        with _translated():
            selected = self._select(spec)
            # The attribute and the value are checked even when no job is selected.
            edited = self._broker.edit(selected, attr, value)
        if not selected and spec.ids:
            raise NoMatchingJobsError("no matching jobs")
        return len(edited)

    # -- selecting jobs ------------------------------------------------------------------

    def _select(self, spec: JobSpec) -> list[str]:
        """The queued jobs a job spec names, as `fetchwork rm|hold|release` selects them."""
        return self._broker.select(list(spec.ids), constraint=spec.constraint,
                                   all_jobs=not spec.ids)

    def _already_done(self, verb: str, job_ids: Sequence[str]) -> int:
        """How many of the jobs an action left alone were already as it would make them."""
        if not job_ids:
            return 0
        rows = self._broker.job_fields(job_ids, ["JobStatus", "FetchworkRequeue"])
        status = {"hold": JobStatus.HELD, "remove": JobStatus.REMOVED}.get(verb)
        if verb == "requeue":
            return sum(1 for row in rows if row.get("FetchworkRequeue"))
        return sum(1 for row in rows if status is not None and row.get("JobStatus") == status)


# -- the pieces of each call --------------------------------------------------------------

def _start_embedded(config: Config) -> None:
    """As the command line does: with no broker configured, start the embedded Redis of
    the state directory when none runs, and say so."""
    if (config.get("FETCHWORK_BROKER") or "").strip():
        return
    from fetchwork.broker.connections.embedded import embedded_for

    server = embedded_for(config)
    if server.start():
        log.warning("no pool was running: started a Redis server for the queue in the "
                    "background (state directory %s); it keeps running until "
                    "`fetchwork redis stop`", config.get("FETCHWORK_STATE_DIR"))


def _warn(message: str) -> None:
    """A submit description's warning, as htcondor2 passes them: a Python warning."""
    warnings.warn(message, stacklevel=4)


def _action(action: htcondor2.JobAction | str) -> str:
    """Broker.apply's action for a JobAction or its name; JobActionError otherwise."""
    if isinstance(action, htcondor2.JobAction):
        name = action.name
    elif isinstance(action, str):
        name = action.strip()
    else:
        raise TypeError(f"action must be an htcondor2.JobAction or its name, not "
                        f"{type(action).__name__}")
    key = name.lower()
    if key in ACTIONS:
        return ACTIONS[key]
    if key in REFUSED:
        raise JobActionError(REFUSED[key])
    known = ", ".join(member.name for member in htcondor2.JobAction)
    raise JobActionError(f"no job action {name!r}: fetchwork does Hold, Release, Remove "
                         f"and Vacate (htcondor2 knows {known})")


def _spec(spec: JobSpecLike) -> JobSpec:
    found = job_spec(spec)
    if found.constraint is not None:
        parse_expr(found.constraint, source="constraint")  # the command line's message
    return found


def _default_opts(opts: Any) -> None:
    if opts is None or int(opts) == int(htcondor2.QueryOpt.Default):
        return
    raise FetchworkError(f"query option {opts!r} is not available: fetchwork.Schedd.query "
                         "takes QueryOpt.Default only")


def _projection(projection: Sequence[str]) -> list[str]:
    if isinstance(projection, str):
        raise TypeError("projection is a list of attribute names, not one string")
    return list(dict.fromkeys(str(name) for name in projection))


def _projected(row: Any, names: Sequence[str]) -> classad2.ClassAd:
    """A job as a ClassAd: only `names` (those it has) when any are given."""
    ad = row if isinstance(row, classad2.ClassAd) else from_dict(
        {name: value for name, value in row.items() if value is not None})
    if not names:
        return ad
    out = classad2.ClassAd()
    for name in names:
        expr = _lookup(ad, name)
        if expr is not None:
            out[name] = expr
    return out


def _lookup(ad: classad2.ClassAd, name: str) -> classad2.ExprTree | None:
    try:
        return ad.lookup(name)
    except KeyError:
        return None


def _called(ads: list[classad2.ClassAd],
            callback: Callable[[classad2.ClassAd], Any] | None) -> list[Any]:
    if callback is None:
        return list(ads)
    return [value for value in (callback(ad) for ad in ads) if value is not None]


def _limited(items: list[Any], limit: int) -> list[Any]:
    return items[:limit] if limit is not None and limit >= 0 else items


def _since(since: int | str | classad2.ExprTree | None) -> Callable[[Any], bool] | None:
    """history's `since` as a test: true for the job the scan stops at (not returned)."""
    if since is None:
        return None
    if isinstance(since, int) and not isinstance(since, bool):
        text = f"ClusterId == {since}"
    elif isinstance(since, str) and job_spec(since).ids:
        cluster, _dot, proc = since.strip().partition(".")
        text = f"ClusterId == {cluster}" + (f" && ProcId == {proc}" if proc else "")
    else:
        text = constraint_text(since) or "true"
    expr = parse_expr(text, source="since")
    return lambda row: as_bool(evaluate(expr, _projected(row, ())))


def _until(rows: Sequence[Any], stop: Callable[[Any], bool]) -> list[Any]:
    out = []
    for row in rows:
        if stop(row):
            break
        out.append(row)
    return out
