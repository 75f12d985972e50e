"""One typed wrapper per Lua script: the only place that knows a script's KEYS and ARGV.

Each script's `.lua` header documents its KEYS[i] and ARGV[i]; its wrapper
here is the same contract on the Python side, with keyword arguments whose
names carry their units (`default_lease_s`, `now_ms`, `grace_ms`), and its
docstring says what it does and what it returns. Callers never lay out a
script's keys or arguments themselves. Job transition scripts take the
pool's keys and the two head arguments (now, events cap) first
(`Store.run`, lua/lib.lua): the wrappers add them; `now_ms` None means the
server's clock. The scripts queued in a pipeline (stage, submit, and the
claim's first reads) take the pipeline as `pipe` and leave their reply to
its execute().

All wrappers live in this one module, next to each other as their scripts
do in `lua/`: a new script gets its wrapper here, and a change of a
script's layout is one change of one function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from redis.client import Pipeline

from . import codec

if TYPE_CHECKING:
    from . import Store

# A job's attributes as name/packed-value pairs (codec.fields_of).
Fields = Sequence[bytes | str]


def _queue(store: Store, pipe: Pipeline, name: str, keys: Sequence[str],
           args: Sequence[Any]) -> None:
    store.scripts.ensure_loaded([name])
    store.scripts.queue(pipe, name, keys, args)


def _ids(reply: Any) -> list[str]:
    return [codec.text(item) for item in reply or []]


def _text(reply: Any) -> str | None:
    return None if reply is None else codec.text(reply)


def _number(value: int | None) -> str:
    """A whole-number argument as script text ('' for none)."""
    return "" if value is None else str(value)


# -- submitting (stage.lua, submit.lua, admit.lua, admit_fail.lua) ------------------------

def stage(store: Store, pipe: Pipeline, *, cluster: int, nonce: str, job_ids: Sequence[str],
          runs: bytes, digests: bytes = b"", queue: bytes = b"",
          autoclusters: bytes = b"") -> None:
    """stage.lua, queued on `pipe`: write the hashes of `job_ids` (new jobs of cluster
    `cluster`, in batch order) from `runs` (codec.pack_for_lua of the runs of shared and
    own fields), checked against the pool's published rules (store/poolrules.py); the
    submission's `nonce` must own the cluster. Its reply in the pipeline's: [hashes
    written, the batch's mode: b'validating', b'blocked' or b''], or an error naming
    the job and the rule that refused it (then nothing of the batch is written).
    `digests` (32 bytes a job, config/signedjob.py staged_digest) are kept for the
    leader's signed admission when the batch waits for it. With `queue` and
    `autoclusters` (what submit() takes as `batch` and `autoclusters`), a submission of
    this one batch is queued by the same call once staged, and the reply has a third
    item, the number of jobs queued (0 when an earlier run of the call queued them)."""
    keys = (store.pool_keys() + [store.keys.job(job) for job in job_ids]
            + [store.keys.staged(cluster), store.keys.settings])
    args = [*store.head_args(), str(cluster), nonce, runs, digests]
    if queue:
        args += [queue, autoclusters]
    _queue(store, pipe, "stage", keys, args)


def submit(store: Store, pipe: Pipeline, *, batch: bytes, mode: str,
           autoclusters: bytes) -> None:
    """submit.lua, queued on `pipe`: queue staged jobs. `batch` packs {job id, sequence,
    FetchworkOrder text, held, blocked, autocluster id} per job, `mode` is what
    stage.lua answered for the batch ('validating', 'blocked' or ''; the pool's
    published rules may make it stricter), `autoclusters` packs {id, representative,
    ...}. Its reply in the pipeline's: the number of jobs queued."""
    _queue(store, pipe, "submit", store.pool_keys() + [store.keys.settings],
           [*store.head_args(), batch, mode, autoclusters])


def admit(store: Store, *, job_id: str, prio: int, deleted: Sequence[str],
          fields: Fields) -> bool:
    """admit.lua: VALIDATING -> IDLE | HELD | BLOCKED with JobPrio `prio` (clamped), the
    attributes `deleted` gone and `fields` stored; False when no longer VALIDATING."""
    return bool(store.run("admit", [job_id], [job_id, prio, len(deleted), *deleted, *fields]))


def admit_fail(store: Store, *, job_id: str, reason: str) -> bool:
    """admit_fail.lua: VALIDATING -> FAILED with RemoveReason `reason`; False when no
    longer VALIDATING."""
    return bool(store.run("admit_fail", [job_id], [job_id, reason]))


# -- the claim (claim_quiet.lua, claim.lua, read_groups.lua, read_backfill.lua) ------------

def claim_quiet(store: Store, *, token: str, slot: str, default_lease_s: float,
                matching: str, refusing: str, judged: str) -> Any:
    """claim_quiet.lua: the one-call claim of the common case for the slot named `slot`
    (claim token `token`). `matching`, `refusing` and `judged` are the autoclusters
    (space-separated ids) whose representative matches the slot for all their jobs,
    that cannot match it, and whose jobs must be judged one by one. Returns
    [b'job', packed {job id, ad flat}], b'none', [b'groups', ids...] (autoclusters to
    judge first) or b'slow' (the full claim must decide)."""
    keys = store.keys
    return store.run("claim_quiet", [],
                     [token, slot, str(default_lease_s), keys.job(""), matching, refusing,
                      judged],
                     extra_keys=[keys.ps_ledger, keys.backfill])


def claim(store: Store, *, job_ids: Sequence[str], token: str, slot: str,
          default_lease_s: float, slot_ad: bytes | str, last_resort: bool = False
          ) -> bytes | None:
    """claim.lua: claim the first of the candidates `job_ids` (matched, in priority order)
    still claimable for the slot named `slot`. `slot_ad` is the packed slot ad when a
    job may need activation, else ''; `last_resort` lets jobs of the soft set start.
    Returns packed {job id, ad flat}, packed {job id, b'activate'} (the job went
    ACTIVATING), or None."""
    keys = store.keys
    policy_keys = [keys.ps_ledger, keys.soft] if last_resort else [keys.ps_ledger]
    return store.run("claim", job_ids,
                     [token, slot, str(default_lease_s), slot_ad, *job_ids],
                     extra_keys=[keys.activation(token), *policy_keys])


def read_groups(store: Store, pipe: Pipeline, *, heads_of: int, jobs_each: int) -> None:
    """read_groups.lua, queued on `pipe`: the autoclusters with idle jobs. Its reply in
    the pipeline's: [[id, best score, ...] best first, ZCARD idle, ZCARD ac:members,
    [the first `jobs_each` members of each of the first `heads_of` autoclusters]]."""
    keys = store.keys
    _queue(store, pipe, "read_groups", [keys.ac_groups, keys.idle, keys.ac_members],
           [heads_of, jobs_each])


def read_backfill(store: Store, pipe: Pipeline) -> None:
    """read_backfill.lua, queued on `pipe`: the leader's backfill reservation as it holds
    jobs back now. Its reply in the pipeline's: the backfill key's value, or None when
    there is none or its job is no longer idle (a lapsed reservation)."""
    _queue(store, pipe, "read_backfill", [store.keys.idle, store.keys.backfill], [])


# -- activation (activate_*.lua, activation_expire.lua, reservation_expire.lua) ------------

def _activation_keys(store: Store, token: str) -> list[str]:
    return [store.keys.activation_reply(token), store.keys.activation(token)]


def activate_start(store: Store, *, job_id: str, token: str, default_lease_s: float,
                   reply_ttl_ms: int) -> bool:
    """activate_start.lua: ACTIVATING -> RUNNING on the claim `token`'s slot, the verdict
    pushed to the claim's reply list (kept `reply_ttl_ms`); False when the claim is gone."""
    return bool(store.run("activate_start", [job_id],
                          [job_id, token, str(default_lease_s), reply_ttl_ms],
                          extra_keys=_activation_keys(store, token)))


def activate_defer(store: Store, *, job_id: str, token: str, action: str, reason: str,
                   interval_ms: int, reply_ttl_ms: int) -> bool:
    """activate_defer.lua: ACTIVATING -> IDLE with `action` 'block', 'reserve' or 'retry',
    not evaluated again for `interval_ms`; False when the claim is gone."""
    return bool(store.run("activate_defer", [job_id],
                          [job_id, token, action, reason, interval_ms, reply_ttl_ms],
                          extra_keys=_activation_keys(store, token)))


def activate_hold(store: Store, *, job_id: str, token: str, reason: str, hold_until_s: int,
                  reply_ttl_ms: int) -> bool:
    """activate_hold.lua: ACTIVATING -> HELD until `hold_until_s` (epoch s; 0: none);
    False when the claim is gone."""
    return bool(store.run("activate_hold", [job_id],
                          [job_id, token, reason, hold_until_s, reply_ttl_ms],
                          extra_keys=_activation_keys(store, token)))


def activate_fail(store: Store, *, job_id: str, token: str, reason: str,
                  reply_ttl_ms: int) -> bool:
    """activate_fail.lua: ACTIVATING -> FAILED with RemoveReason `reason`; False when the
    claim is gone."""
    return bool(store.run("activate_fail", [job_id], [job_id, token, reason, reply_ttl_ms],
                          extra_keys=_activation_keys(store, token)))


def activate_abandon(store: Store, *, job_id: str, token: str) -> bytes | None:
    """activate_abandon.lua: the claim `token` gives up waiting: ACTIVATING -> IDLE.
    Returns packed {job id, ad flat} when the verdict came first and started the job
    under this claim, else None."""
    return store.run("activate_abandon", [job_id], [job_id, token],
                     extra_keys=[store.keys.activation(token)])


def activation_expire(store: Store, *, job_ids: Sequence[str], grace_ms: int) -> list[str]:
    """activation_expire.lua: ACTIVATING -> IDLE for jobs whose activation outlived its
    deadline by `grace_ms`; the ids put back."""
    return _ids(store.run("activation_expire", job_ids, [grace_ms, *job_ids]))


def reservation_expire(store: Store, *, job_ids: Sequence[str], grace_ms: int) -> list[str]:
    """reservation_expire.lua: drop slot reservations whose job waited `grace_ms` past its
    re-evaluation time; the ids whose reservation lapsed."""
    return _ids(store.run("reservation_expire", job_ids, [grace_ms, *job_ids]))


# -- the execute side (reject.lua, renew.lua, finish.lua, policy_exit.lua, reap.lua) -------

def reject(store: Store, *, job_id: str, token: str) -> str | None:
    """reject.lua: RUNNING -> IDLE at the head of its priority group; the new state, or
    None when the claim is not the caller's."""
    return _text(store.run("reject", [job_id], [job_id, token]))


def renew(store: Store, *, job_id: str, token: str, default_lease_s: float,
          suspended: bool | None, fields: Fields) -> str:
    """renew.lua: extend the lease, store `fields`, and with `suspended` True/False move
    the job to SUSPENDED/RUNNING. Returns 'ok', 'gone', 'removed', 'held' or 'requeued'."""
    flag = "" if suspended is None else ("1" if suspended else "0")
    return codec.text(store.run("renew", [job_id],
                                [job_id, token, str(default_lease_s), flag, *fields]))


def finish(store: Store, *, job_id: str, token: str, how: str, reason: str = "",
           hold_code: int | None = None, hold_subcode: int | None = None, fields: Fields = (),
           policy_attrs: Sequence[str] = ()) -> str | None:
    """finish.lua: end the claim with `how` (exit, evict, hold, remove), storing `fields`
    first; `reason` the HoldReason or RemoveReason ('' none), `hold_code` and
    `hold_subcode` a hold's HoldReasonCode and HoldReasonSubCode (None: none).
    `policy_attrs`: for an exit the job policy may change, the exit policy's attribute
    names; when the job has any of them (other than OnExitRemove = true) nothing
    changes and the reply is 'policy'. Returns the new state (or 'policy'), or None
    when the claim is not the caller's."""
    return _text(store.run("finish", [job_id],
                           [job_id, token, how, reason, _number(hold_code),
                            _number(hold_subcode), " ".join(policy_attrs), *fields]))


def policy_exit(store: Store, *, job_id: str, token: str, verdict: str, reason: str,
                hold_subcode: int, fields: Fields) -> str | None:
    """policy_exit.lua: end the claim of a job that exited with its job policy's
    `verdict` (hold, requeue or remove), storing `fields` first; the new state, or None
    when the claim is not the caller's."""
    return _text(store.run("policy_exit", [job_id],
                           [job_id, token, verdict, reason, str(hold_subcode), *fields]))


def reap(store: Store, *, job_ids: Sequence[str], now_ms: int | None = None) -> list[str]:
    """reap.lua: claimed jobs whose lease lapsed by `now_ms` (None: the server's clock)
    go back to IDLE, or FAILED when not Rerunnable; the ids reaped."""
    return _ids(store.run("reap", job_ids, job_ids, now_ms=now_ms))


# -- user actions (remove.lua, hold.lua, release.lua, requeue.lua) -------------------------

def remove(store: Store, *, job_ids: Sequence[str], reason: str) -> list[str]:
    """remove.lua: remove the jobs (a claimed one is marked); the ids affected."""
    return _ids(store.run("remove", job_ids, [reason, *job_ids]))


def hold(store: Store, *, job_ids: Sequence[str], reason: str, code: int,
         hold_until_s: int | None = None) -> list[str]:
    """hold.lua: hold the jobs with HoldReason `reason` and HoldReasonCode `code` (a
    claimed one is marked), until `hold_until_s` (epoch s) when given; the ids affected."""
    until = _number(None if hold_until_s is None else int(hold_until_s))
    return _ids(store.run("hold", job_ids, [reason, code, until, *job_ids]))


def release(store: Store, *, job_ids: Sequence[str]) -> list[str]:
    """release.lua: HELD -> IDLE (a claimed job marked held gets its claim back); the ids
    affected."""
    return _ids(store.run("release", job_ids, job_ids))


def requeue(store: Store, *, job_ids: Sequence[str]) -> list[str]:
    """requeue.lua: mark claimed jobs to go back to IDLE when their claim ends; the ids
    marked."""
    return _ids(store.run("requeue", job_ids, job_ids))


# -- the user's edit of an attribute (qedit.lua) -----------------------------------------

def qedit(store: Store, *, job_ids: Sequence[str], attr: str, value: bytes,
         priority_group: int | None, significant: bool, periodic: bool) -> list[str]:
    """qedit.lua: store attribute `attr` (packed `value`) on the unfinished jobs among
    `job_ids`; `priority_group` (-JobPrio, clamped) for a JobPrio edit; `significant`
    when a match reads `attr` of every job (the jobs leave their autoclusters);
    `periodic` for a periodic policy expression (the jobs join the periodic index).
    The ids edited; an AllowedJobDuration above the pool's published MAX_WALLTIME (or
    with none published) is an error reply, and no job is edited."""
    flags = ["1" if significant else "", "1" if periodic else ""]
    return _ids(store.run("qedit", job_ids, [attr, value, _number(priority_group), *flags,
                                            *job_ids],
                          extra_keys=[store.keys.settings, store.keys.periodic]))


# -- a person's requests, carried out by the leader (broker/trust/desk.py) --------------------

def admit_signed(store: Store, pipe: Pipeline, *, jobs: Sequence[tuple[str, int, bool, str]],
                 batch: bytes, blocked_reason: str) -> None:
    """admit_signed.lua, queued on `pipe`: admit VALIDATING jobs, each (id, JobPrio,
    kept BLOCKED by the limits, autocluster or ''), whose admission is their signature
    and the pool's rules (a signing pool with no submission filter: filters/leader.py);
    `batch` is their signed batch's string (config/signedjob.py sign_batch_blob, the
    jobs its leaves in order), stored once for them; `blocked_reason` is what the
    limits' BLOCKED jobs show. Its reply in the pipeline's: how many were still
    VALIDATING and were admitted."""
    keys = store.pool_keys() + [store.keys.job(job[0]) for job in jobs]
    _queue(store, pipe, "admit_signed", keys,
           [*store.head_args(), blocked_reason, batch,
            *(value for job_id, prio, blocked, group in jobs
              for value in (job_id, prio, "1" if blocked else "", group))])


def sig_sweep(store: Store, pipe: Pipeline, *, batches: int) -> None:
    """sig_sweep.lua, queued on `pipe`: free up to `batches` stored signed batches (taken
    at random) whose jobs have all left the queue; its reply: how many were freed."""
    _queue(store, pipe, "sig_sweep", [store.keys.queue, store.keys.sig_batches], [batches])


def read_waiting(store: Store, pipe: Pipeline, *, count: int) -> None:
    """read_waiting.lua, queued on `pipe`: take up to `count` jobs from the head of the
    validating set and read what signed admission reads of them (filters/leader.py).
    Its reply in the pipeline's: [the ids, then, when there are any, the replies of
    batchads.queue_reads and of signing.queue_staged for them]."""
    _queue(store, pipe, "read_waiting", [store.keys.validating, store.keys.queue], [count])


# -- the leader's duties ---------------------------------------------------------------------

def release_due(store: Store, *, job_ids: Sequence[str]) -> list[str]:
    """release_due.lua: HELD -> IDLE for held jobs whose HoldUntil passed; the ids
    released."""
    return _ids(store.run("release_due", job_ids, job_ids))


def block(store: Store, *, items: Sequence[Sequence[Any]]) -> int:
    """block.lua: IDLE -> BLOCKED (or a new reason) for `items`, each [job id,
    BlockedReason, soft, policy attributes]; the number of jobs written."""
    job_ids = [item[0] for item in items]
    return int(store.run("block", job_ids, [codec.pack_for_lua(list(items))],
                         extra_keys=[store.keys.soft]))


def unblock(store: Store, *, items: Sequence[Sequence[Any]]) -> int:
    """unblock.lua: BLOCKED -> IDLE for `items`, each [job id, policy attributes]; the
    number of jobs written."""
    job_ids = [item[0] for item in items]
    return int(store.run("unblock", job_ids, [codec.pack_for_lua(list(items))],
                         extra_keys=[store.keys.soft]))


def reorder(store: Store, *, items: Sequence[Sequence[Any]]) -> int:
    """reorder.lua: new idle scores for jobs still IDLE, `items` each [job id, idle score
    as decimal text, FetchworkPriority]; the number of jobs moved."""
    job_ids = [item[0] for item in items]
    return int(store.run("reorder", job_ids, [codec.pack_for_lua(list(items))]))


def overrun(store: Store, *, reasons: Sequence[tuple[str, str]]) -> list[str]:
    """overrun.lua: mark claimed jobs past their walltime to stop, `reasons` each (job id,
    RemoveReason); the ids marked."""
    return _ids(store.run("overrun", [job for job, _reason in reasons],
                          [text for pair in reasons for text in pair]))


def policy_act(store: Store, *, job_id: str, action: str, reason: str,
               hold_subcode: int) -> str | None:
    """policy_act.lua: what a periodic expression asks for (`action` hold, release or
    remove); the action, or None when the job's state does not allow it."""
    return _text(store.run("policy_act", [job_id],
                           [job_id, action, reason, str(hold_subcode)]))


def depend(store: Store, *, items: Sequence[Sequence[Any]]) -> int:
    """depend.lua: apply dependency decisions, `items` each [job id, 'ready'|'wait'|'fail',
    dependencies left, reason]; the number of jobs changed."""
    job_ids = [item[0] for item in items]
    return int(store.run("depend", job_ids, [codec.pack_for_lua(list(items))],
                         extra_keys=[store.keys.dep_waiting]))


def bypass(store: Store, *, job_id: str, started_ahead: int) -> int | None:
    """bypass.lua: BypassCount of the reserved job grows by `started_ahead`; the new count,
    or None when the job is no longer IDLE."""
    grown = store.scripts.call("bypass", [store.keys.job(job_id)], [started_ahead])
    return None if grown is None else int(grown)


def userlog_advance(store: Store, *, replica: str, read_position: str,
                    new_position: str) -> bool:
    """userlog_advance.lua: move the user log position from `read_position` ('' none) to
    `new_position`, only for the leading `replica`; False when it does not lead or
    another writer moved it."""
    keys = store.keys
    return bool(store.scripts.call("userlog_advance", [keys.userlog, keys.leader],
                                   [replica, read_position, new_position]))


def trim_history(store: Store, *, job_ids: Sequence[str]) -> int:
    """trim_history.lua: forget the finished jobs `job_ids` (read from the head of the
    history) still there; how many went."""
    keys = [store.keys.history] + [store.keys.job(job) for job in job_ids]
    return int(store.scripts.call("trim_history", keys, list(job_ids)))


def leader_renew(store: Store, *, replica: str, lease_ms: int) -> bool:
    """leader_renew.lua: extend `replica`'s leadership by `lease_ms` if it holds it."""
    return bool(store.scripts.call("leader_renew", [store.keys.leader], [replica, lease_ms]))


def leader_resign(store: Store, *, replica: str) -> bool:
    """leader_resign.lua: give up `replica`'s leadership; False when it did not lead."""
    return bool(store.scripts.call("leader_resign", [store.keys.leader], [replica]))


# -- reads (read_ads.lua, read_fields.lua, read_ids.lua) -----------------------------------

def read_ads(store: Store, *, job_ids: Sequence[str]) -> bytes:
    """read_ads.lua: one packed array of the ads (packed maps; empty for a missing job) of
    `job_ids`, in order (codec.decode_packed_hashes reads it)."""
    return store.scripts.call("read_ads", [store.keys.job(job) for job in job_ids], [])


def read_ads_split_queued(store: Store, pipe: Pipeline, *, job_ids: Sequence[str]) -> None:
    """read_ads.lua's 'split' mode queued on `pipe` (signed admission reads a batch's
    ads and staged digests in one round trip: store/batchads.py)."""
    _queue(store, pipe, "read_ads", [store.keys.job(job) for job in job_ids], ["split"])


def read_fields(store: Store, *, job_ids: Sequence[str], names: Sequence[str]) -> bytes:
    """read_fields.lua: one packed array of the values of attributes `names` (None where
    absent) of each of `job_ids`, in order."""
    return store.scripts.call("read_fields", [store.keys.job(job) for job in job_ids],
                              list(names))


def read_ids(store: Store, *, key: str, start: int, stop: int, rev: bool) -> list[str]:
    """read_ids.lua: the members of sorted set `key` from rank `start` to `stop` (-1: the
    end), highest score first with `rev`."""
    joined = codec.text(store.scripts.call("read_ids", [key], [start, stop,
                                                               "rev" if rev else ""]))
    return joined.split("\n") if joined else []


# -- the pool's rules (publish_rules.lua; store/poolrules.py) -------------------------------

def publish_rules(store: Store, *, rules: Mapping[str, str], digest: str,
                  summary: Mapping[str, str], replica: str, now_s: float) -> tuple[int, bool]:
    """publish_rules.lua: make `rules` the pool's published settings (a new version when
    `digest` differs from the stored one) and write the filter `summary`. Returns
    (version in force, whether this call published it)."""
    flat_rules = [item for pair in rules.items() for item in pair]
    flat_summary = [item for pair in summary.items() for item in pair]
    version, changed = store.scripts.call(
        "publish_rules", [store.keys.settings, store.keys.filters],
        [digest, replica, f"{now_s:.3f}", str(len(rules)), *flat_rules, *flat_summary])
    return int(version), bool(changed)


# -- file transfer (transfer_chunk.lua, transfer_attach.lua, transfer_detach.lua,
#    transfer_settle.lua; the key layout is in lua/transferrefs.lua) -------------------

def transfer_chunk(store: Store, *, digest: str, data: bytes, pending_ms: int) -> bool:
    """transfer_chunk.lua: store chunk `data` (whose SHA-256 hex is `digest`, checked by
    the caller) unless the pool has it; a chunk no manifest holds yet is kept
    `pending_ms`. True when the bytes were stored."""
    keys = [store.keys.xfer_chunk(digest), store.keys.xfer_chunkrefs]
    return bool(store.scripts.call("transfer_chunk", keys, [digest, data, pending_ms]))


def ask_transfer_chunk(store: Store, pipe: Pipeline, *, digest: str, pending_ms: int) -> None:
    """transfer_chunk.lua in its asking form, queued on `pipe`: its reply is 0 when the
    pool has chunk `digest` (a pending one kept `pending_ms` more), -1 when it lacks it;
    the caller then sends the bytes with a plain SET (transfer/chunks.py)."""
    keys = [store.keys.xfer_chunk(digest), store.keys.xfer_chunkrefs]
    _queue(store, pipe, "transfer_chunk", keys, [digest, b"", pending_ms, "ask"])


def ask_transfer_chunk_command(store: Store, *, digest: str,
                               pending_ms: int) -> tuple[Any, ...]:
    """`ask_transfer_chunk` as the arguments of one EVALSHA, for a caller that writes
    commands on a connection itself and reads their replies later
    (transfer/sendwindow.py); load the script first (Scripts.ensure_loaded)."""
    keys = [store.keys.xfer_chunk(digest), store.keys.xfer_chunkrefs]
    return store.scripts.command("transfer_chunk", keys, [digest, b"", pending_ms, "ask"])


def transfer_attach(store: Store, *, manifest_id: str, packed: bytes, digests: Sequence[str],
                    jobs: int, cap_bytes: int, output_of: str = "",
                    expires_s: int = 0,
                    inline_bytes: int = 0) -> tuple[int, list[str] | tuple[int, int] | int]:
    """transfer_attach.lua: `jobs` jobs need manifest `manifest_id` (`packed`, made of the
    distinct chunks `digests`); a manifest new to the pool is stored when all its chunks
    are there and `cap_bytes` (0: none) allows its new bytes. For an output sandbox,
    `output_of` is the job that returned it and `expires_s` when it expires;
    `inline_bytes` the bytes of the small files inside it, counted with its chunks.
    Returns (1, new bytes), (0, [missing digests]) or (-1, (bytes held, new bytes))."""
    k = store.keys
    keys = [k.xfer_manifest(manifest_id), k.xfer_refs, k.xfer_chunkrefs, k.xfer_bytes,
            k.xfer_outputs, *(k.xfer_chunk(digest) for digest in digests)]
    reply = store.scripts.call("transfer_attach", keys,
                               [manifest_id, packed, jobs, cap_bytes, output_of, expires_s,
                                inline_bytes, *digests])
    verdict = int(reply[0])
    if verdict == 1:
        return 1, int(reply[1])
    if verdict == 0:
        return 0, [codec.text(item) for item in reply[1:]]
    return -1, (int(reply[1]), int(reply[2]))


def transfer_detach(store: Store, *, manifest_id: str, jobs: int) -> int:
    """transfer_detach.lua: `jobs` jobs no longer need input manifest `manifest_id`; it
    and the chunks only it held are freed at no reference. The references left."""
    return int(store.scripts.call("transfer_detach", [store.keys.xfer_refs],
                                  [manifest_id, jobs]))


def transfer_settle(store: Store, *, manifest_id: str, job_id: str, how: str) -> bool:
    """transfer_settle.lua: job `job_id`'s outputs (`manifest_id`) were delivered or
    expired (`how`); they stop waiting and their manifest loses the job's reference.
    False when they were not waiting (settled meanwhile)."""
    k = store.keys
    return bool(store.scripts.call("transfer_settle",
                                   [k.xfer_refs, k.xfer_outputs, k.job(job_id)],
                                   [manifest_id, job_id, how]))


def transfer_event(store: Store, *, job_id: str, kind: str,
                   fields: Sequence[tuple[str, str]] = ()) -> str:
    """transfer_event.lua: append a `transfer` event of job `job_id` (`kind` one of
    input_queued ... output_finished, with `fields` such as host, bytes, seconds,
    success) to the pool's stream; its id."""
    flat = [item for pair in fields for item in pair]
    return codec.text(store.scripts.call("transfer_event", [store.keys.events],
                                         [store.events_maxlen, job_id, kind, *flat]))


def queue_transfer_event(store: Store, pipe: Pipeline, *, job_id: str, kind: str,
                         fields: Sequence[tuple[str, str]] = ()) -> None:
    """transfer_event.lua queued on `pipe`, with `transfer_event`'s arguments (events
    of one transfer that come together, in one round trip). Its reply in the
    pipeline's: the event's id."""
    flat = [item for pair in fields for item in pair]
    _queue(store, pipe, "transfer_event", [store.keys.events],
           [store.events_maxlen, job_id, kind, *flat])


# -- file transfer: small chunks sent together ---------------------------------------


def queue_transfer_chunk(store: Store, pipe: Pipeline, *, digest: str, data: bytes,
                         pending_ms: int) -> None:
    """`transfer_chunk` queued on `pipe` (a sandbox's small files sent in one round
    trip); its reply in the pipeline's: 1 when the bytes were stored."""
    keys = [store.keys.xfer_chunk(digest), store.keys.xfer_chunkrefs]
    _queue(store, pipe, "transfer_chunk", keys, [digest, data, pending_ms])
