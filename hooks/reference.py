"""The reference hooks: keyword FETCHWORK, speaking to the fetchwork broker.

Each hook is a function `hook(args, stdin_text)` with the same strings in
and out as the program form (`fetchwork hook <NAME> [WORD]`), so the startd
and starter call them in-process (`python:fetchwork.hooks.reference:<name>`)
or as programs with identical results.

- fetch_work: claims the best matching idle job for the slot on stdin and
  prints its ad; nothing when there is no work. An idle slot long-polls the
  broker's event stream for up to FETCHWORK_FETCH_LONG_POLL seconds.
- reply_fetch: a rejected job goes back to the head of its priority group.
- evict_claim: advisory; the job on the claim has already ended or is being
  vacated, and its exit hook requeues it, except a job whose starter could
  not be started (the slot is still Claimed/Idle): that one is requeued here.
- prepare_job: in-process, starts a lease keeper in the starter that renews
  the job's lease while the starter lives (whatever the update interval) and
  asks the starter to stop the job when it was removed or held meanwhile.
- update_job_info: stores the measured attributes and renews the lease.
- job_exit: finishes the job: exit -> completed, evict -> idle again (or
  failed when not rerunnable), hold -> held, remove -> removed; it retries
  through a broker outage (retrying.py), then fails: the startd reports later.
- withdraw_slot: the startd exits; its slot leaves `fetchwork status` at once.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import classad2

from fetchwork.broker.client import Broker
from fetchwork.config import ads, protocol
from fetchwork.config.loader import get_config
from fetchwork.config.protocol import ACCEPT, EXIT_HOWS, HOLD, KILL, REJECT, REMOVE, ad_job_id
from fetchwork.errors import FetchworkError, RedisUnavailableError
from fetchwork.hooks import brokerconn, control, slotads, slotclaim
from fetchwork.hooks.leasekeepers import LeaseKeeper, LeaseKeepers
from fetchwork.hooks.referenceslotad import SlotAds
from fetchwork.hooks.retrying import quietly, through_outage

log = logging.getLogger(__name__)

# Attributes the starter adds to the job ad that the broker keeps (the hold
# attributes when the job could not start: the broker decides what to store).
REPORTED_ATTRS = (
    "JobState", "JobPid", "NumPids", "JobStartDate", "RemoteSysCpu", "RemoteUserCpu",
    "ImageSize", "ExitReason", "ExitBySignal", "ExitSignal", "ExitCode", "JobDuration",
    "HoldReason", "HoldReasonCode", "HoldReasonSubCode", "MemoryUsage", "MemoryExceeded",
    # File transfer (starter/transferstep.py): the returned outputs and the statistics.
    "FetchworkOutputManifest", "FetchworkCheckpointManifest", "TransferInputStats",
    "TransferOutputStats", "TransferInputSizeMB", "BytesSent", "BytesRecvd",
)
CLAIM_ATTR = "FetchworkClaim"

# The slot ads fetch_work claims with, one per slot, changed in place (referenceslotad.py).
_slot_ads = SlotAds()


class HookUsageError(FetchworkError):
    """A reference hook was called with arguments or input it cannot use."""


def broker() -> Broker:
    """The process's broker client, connected on first use (never starts a server)."""
    return brokerconn.broker()


def reset_broker() -> None:
    """Forget the cached client (after a configuration reload, or in tests)."""
    brokerconn.reset()
    slotads.forget()


def job_id_of(job_ad: classad2.ClassAd) -> str:
    job = ad_job_id(job_ad)
    if job is None:
        raise HookUsageError("the job ad has no ClusterId/ProcId: it was not fetched "
                             "from the fetchwork broker")
    return job


def _token_of(job_ad: classad2.ClassAd) -> str:
    token = job_ad.get(CLAIM_ATTR)
    if not isinstance(token, str) or not token:
        raise HookUsageError(f"the job ad has no {CLAIM_ATTR}: it was not claimed "
                             "through the fetchwork broker")
    return token


def _reported(job_ad: classad2.ClassAd) -> dict[str, Any]:
    reported = classad2.ClassAd()
    for name in REPORTED_ATTRS:
        if name in job_ad:
            reported[name] = job_ad.lookup(name)
    return ads.to_dict(reported)


# What the hooks read of the job ad (lower case: names are case-insensitive): the
# prepare hook its id, claim and lease; the exit hook its id, claim and measurements.
_ID_NAMES = ("ClusterId", "ProcId", "GlobalJobId", CLAIM_ATTR)
_PREPARE_NAMES = frozenset(name.lower() for name in (*_ID_NAMES, "JobLeaseDuration"))
_EXIT_NAMES = frozenset(name.lower() for name in (*_ID_NAMES, *REPORTED_ATTRS))


def _job_ad_of(stdin_text: str, names: frozenset[str] | None = None) -> classad2.ClassAd:
    """The job ad of a hook's input (the pair's first ad), or the part of it a hook
    reads (`names`): see `_taken_ad`."""
    if names is not None:
        taken = _taken_ad(stdin_text, names)
        if taken is not None:
            return taken
    return ads.first_of_pair(stdin_text, source="hook input")


def _exit_ad(stdin_text: str) -> classad2.ClassAd:
    """The job ad on the exit hook's input, or as much of it as the hook reads
    (`_taken_ad`)."""
    taken = _taken_ad(stdin_text, _EXIT_NAMES)
    return taken if taken is not None else ads.parse_ad(stdin_text, source="job ad")


def _taken_ad(stdin_text: str, names: frozenset[str]) -> classad2.ClassAd | None:
    """The attributes `names` of the job ad, when the starter's text carries the
    ad's values (`ads.AdText`) to an in-process call: taken from them rather than
    from a parse of the whole text back. None (parse the text, as ever) for any
    other text, or when one of them is not a plain literal."""
    values = stdin_text.take() if isinstance(stdin_text, ads.AdText) else None
    if values is None:
        return None
    ad = classad2.ClassAd()
    for name, value in values.items():
        if name.lower() in names:
            if not isinstance(value, bool | int | float | str):
                return None
            ad[name] = value
    return ad


def _publish(slot_ad: classad2.ClassAd, config: Any, text: str | None = None) -> None:
    slotads.publish(slot_ad, config, broker, text)


def _publish_running_slot(job_ad: classad2.ClassAd, job_id: str) -> None:
    slotads.publish_running_slot(job_ad, job_id, broker)


# -- startd hooks ------------------------------------------------------------

def fetch_work(args: Sequence[str], stdin_text: str) -> str | None:
    """Claim a job for the slot ad on stdin; its ad, or None when there is no work."""
    config = get_config()
    with _slot_ads.lend(stdin_text, source="slot ad") as slot_ad:
        busy = slot_ad.get("Activity") == "Busy"
        wait_s = 0.0 if busy else config.get_duration_s("FETCHWORK_FETCH_LONG_POLL")
        try:
            _publish(slot_ad, config, stdin_text)
            job = broker().claim_attrs(slotclaim.claiming_ad(slot_ad), wait_s=wait_s)
        except RedisUnavailableError:
            # Fail no faster than a long poll would: a startd retrying a fetch
            # against a broker that is down must not spin.
            time.sleep(max(wait_s, 1.0))
            raise
    if job is None:
        return None
    # The startd takes the values rather than parse the text; no ClassAd is made here.
    return ads.AdText(job)


def reply_fetch(args: Sequence[str], stdin_text: str) -> None:
    """On `reject`, hand the job back to the head of its group."""
    decision = args[-1] if args else ""
    if decision not in (ACCEPT, REJECT):
        raise HookUsageError(f"reply_fetch expects 'accept' or 'reject', got {decision!r}")
    if decision == REJECT:  # an accepted job needs nothing: its ad is not even read
        job_ad = _job_ad_of(stdin_text)
        job_id = job_id_of(job_ad)
        if broker().reject(job_id, _token_of(job_ad)):
            log.info("job %s rejected by the slot; back at the head of its group", job_id)
    return None


# An accepted job needs nothing, so the startd need not call it for one (the
# program form, `fetchwork hook REPLY_FETCH`, is still run for both words).
reply_fetch.ignores = (ACCEPT,)  # type: ignore[attr-defined]


def evict_claim(args: Sequence[str], stdin_text: str) -> None:
    """Advisory: the claim ends; the job's own exit hook settles the job.

    A claim evicted while the slot is still Claimed/Idle never got its job
    started (its starter could not be made), so no exit hook will come: the
    job goes back to the head of its group at once. The slot is shown as
    unclaimed at once rather than at its next fetch.
    """
    job_ad, slot_ad = ads.split_pair(stdin_text, source="hook input")
    if slot_ad is None:
        return None
    if slot_ad.get("State") == "Claimed" and slot_ad.get("Activity") == "Idle":
        through_outage(lambda: _give_back(job_ad), "giving back the evicted claim's job",
                       get_config().get_duration_s("FETCHWORK_REPORT_RETRY_TIME"))
    if slotclaim.is_dynamic(slot_ad):  # gone with its claim; its resources went back
        name = slot_ad.get("Name")
        if isinstance(name, str) and name:
            quietly(lambda: slotads.withdraw(name, broker), "withdrawing the dynamic slot")
        return None
    slot_ad["State"] = "Unclaimed"
    slot_ad["Activity"] = "Idle"
    for name in ("JobId", "ClientMachine", "RemoteOwner"):
        if name in slot_ad:
            del slot_ad[name]
    quietly(lambda: _publish(slot_ad, get_config()), "showing the slot unclaimed")
    return None


def withdraw_slot(args: Sequence[str], stdin_text: str) -> None:
    """The startd exits: take its slot ad (on stdin) off `fetchwork status` at once."""
    name = ads.parse_ad(stdin_text, source="slot ad").get("Name")
    if not isinstance(name, str) or not name:
        raise HookUsageError("withdraw_slot expects a slot ad with a Name on stdin")
    slotads.withdraw(name, broker)
    log.info("slot %s withdrawn", name)
    return None


def _give_back(job_ad: classad2.ClassAd) -> None:
    """Requeue a claimed job that never started (nothing if the claim is no longer ours)."""
    job_id, token = ad_job_id(job_ad), job_ad.get(CLAIM_ATTR)
    if job_id is None or not isinstance(token, str) or not token:
        return
    if broker().reject(job_id, token):
        log.info("job %s never started on the evicted claim; back at the head of its group",
                 job_id)


# -- starter hooks -----------------------------------------------------------

def prepare_job(args: Sequence[str], stdin_text: str) -> tuple[int, str] | None:
    """Check the claim is still ours; in-process, keep its lease alive.

    In-process the check runs in the lease keeper, off the job's start path,
    FIRST_CHECK_S after the start; a claim found gone there stops the job. A program checks before
    answering, as it cannot outlive the hook.
    """
    job_ad = _job_ad_of(stdin_text, _PREPARE_NAMES)
    job_id, token = job_id_of(job_ad), _token_of(job_ad)
    if _mode["in_process"]:
        _start_keeper(job_id, token, job_ad)
        return None
    status = broker().renew(job_id, token)
    if status != "ok":
        # Non-zero: the starter does not run a job the broker no longer gives us.
        return _refuse(job_id, status)
    return None


def _refuse(job_id: str, status: str) -> tuple[int, str]:
    log.warning("job %s is %s at the broker; not running it", job_id, status)
    return (1, "")


def update_job_info(args: Sequence[str], stdin_text: str) -> None:
    """Store the measured attributes; ask the starter to stop a removed or held job."""
    job_ad = ads.parse_ad(stdin_text, source="job ad")
    job_id, token = job_id_of(job_ad), _token_of(job_ad)
    suspended = job_ad.get("JobState") == "Suspended" if "JobState" in job_ad else None
    status = broker().renew(job_id, token, _reported(job_ad), suspended=suspended)
    _act_on(job_id, status)
    _publish_running_slot(job_ad, job_id)
    return None


def job_exit(args: Sequence[str], stdin_text: str) -> None:
    """Settle the job at the broker according to how it left the slot."""
    how = args[-1] if args else ""
    if how not in EXIT_HOWS:
        raise HookUsageError(f"job_exit expects one of {', '.join(EXIT_HOWS)}, got {how!r}")
    job_ad = _exit_ad(stdin_text)
    job_id, token = job_id_of(job_ad), _token_of(job_ad)
    finished = through_outage(lambda: broker().finish(job_id, token, how, _reported(job_ad)),
                              f"job {job_id}: reporting {how}",
                              get_config().get_duration_s("FETCHWORK_REPORT_RETRY_TIME"))
    _stop_keeper(job_id)  # only now: it renews the lease while finish is retried
    if finished:
        # The broker client has said it at info, with the state the job took.
        log.debug("job %s finished at the broker (%s)", job_id, how)
    else:
        log.warning("job %s: the broker no longer holds this claim; %s not recorded", job_id, how)
    return None


# -- the lease keeper (in-process only) --------------------------------------

# The program form (`fetchwork hook`) turns this off: a short-lived process
# cannot keep a lease, so it relies on the update hook alone.
_mode = {"in_process": True}


def set_program_mode() -> None:
    _mode["in_process"] = False


# What the starter is asked to do when a renewal answers other than "ok".
_STOP_REQUESTS = {"removed": REMOVE, "held": HOLD, "gone": KILL, "requeued": protocol.VACATE}


def _act_on(job_id: str, status: str, run: int | None = None) -> None:
    if status in _STOP_REQUESTS and _mode["in_process"]:
        log.info("job %s is %s at the broker; stopping it", job_id, status)
        try:
            control.request(_STOP_REQUESTS[status], run)
        except FetchworkError as exc:  # called outside a starter: nothing to stop
            log.warning("job %s is %s but cannot be stopped here: %s", job_id, status, exc)


# The lease keepers of this process (the starter's), served by one thread.
_keepers = LeaseKeepers(lambda job_id, token: broker().renew(job_id, token), _act_on)


def _keeper_for(job_id: str, token: str, job_ad: classad2.ClassAd) -> LeaseKeeper:
    """A lease keeper for the job (not started): its lease, else the default one."""
    lease_s = ads.as_number(ads.evaluate_attr(job_ad, "JobLeaseDuration"))
    if lease_s is None or lease_s <= 0:
        lease_s = get_config().get_duration_s("JOB_DEFAULT_LEASE_DURATION")
    renew_s = get_config().get_duration_s("FETCHWORK_RENEW_INTERVAL")
    return LeaseKeeper(job_id, token, lease_s, renew_s)


def _start_keeper(job_id: str, token: str, job_ad: classad2.ClassAd) -> None:
    keeper = _keeper_for(job_id, token, job_ad)
    keeper.control_run = control.current()
    _keepers.start(keeper)


def _stop_keeper(job_id: str) -> None:
    _keepers.stop(job_id)


def prepare_standby() -> None:
    """Called in a starter forked ahead while it waits for its job: the exit
    hook's broker connection is then made before the job, not on its way out,
    and the prepare hook's own steps are run once on a sample (a lease keeper
    made, not started; the keepers' thread started), so the job's call finds
    their code run before."""
    broker()
    _keepers.warm()
    job_ad = _job_ad_of(f'{CLAIM_ATTR} = "sample"\nClusterId = 1\nProcId = 0\n'
                        f'JobLeaseDuration = 1200\n{ads.SEPARATOR}\n')
    _keeper_for(job_id_of(job_ad), _token_of(job_ad), job_ad)


def prepare_fork() -> None:
    """Called by the starter zygote before it forks starters: what each starter's
    first broker call needs (the client's modules, the Lua scripts' text and
    digests, the client itself, not connected) is then done once, not once per job."""
    from fetchwork.broker.connections import clients  # noqa: F401 - imported ahead on purpose
    from fetchwork.broker.store import scripts  # noqa: F401 - imported ahead on purpose

    for name in (*scripts.TRANSITIONS, *scripts.STANDALONE):
        scripts.sha(name)
    brokerconn.make_before_fork()


HOOKS = {
    "FETCH_WORK": fetch_work,
    "REPLY_FETCH": reply_fetch,
    "EVICT_CLAIM": evict_claim,
    "PREPARE_JOB": prepare_job,
    "UPDATE_JOB_INFO": update_job_info,
    "JOB_EXIT": job_exit,
    "WITHDRAW_SLOT": withdraw_slot,
}


def run_program(words: Sequence[str], stdin_text: str) -> int:
    """The program form: find the hook name among `words`, pass the rest as args."""
    set_program_mode()
    names = [w for w in words if w.upper() in HOOKS]
    if len(names) != 1:
        print(f"fetchwork hook: name exactly one of {', '.join(HOOKS)}", file=sys.stderr)
        return 2
    rest = [w for w in words if w is not names[0]]
    started = time.monotonic()
    try:
        result = HOOKS[names[0].upper()](rest, stdin_text)
    except FetchworkError as exc:
        print(f"fetchwork hook {names[0]}: {exc}", file=sys.stderr)
        return 1
    code, out = (result if isinstance(result, tuple) else (0, result or ""))
    if out:
        sys.stdout.write(out)
    log.debug("hook %s done in %.3fs", names[0], time.monotonic() - started)
    return code
