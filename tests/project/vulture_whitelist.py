"""Names in the product that are used where vulture cannot see it.

vulture reports what nothing in the product refers to by name. The names
below are used all the same: by a string, by a library, by a Lua script, by
the benchmarks, or read by the tests only. pyproject.toml's `[tool.vulture]`
reads this file with the product's folders; the quality test checks that
each entry is still needed (vulture reports it when this file is left out).
An entry is `_.name`, as `vulture --make-whitelist` writes them (the file is
read, never imported).
"""

# ruff: noqa: B018, F821

# The commands: fetchwork/cli.py COMMANDS loads each by (module, attribute).
_.submit_command
_.q_command
_.history_command
_.rm_command
_.hold_command
_.release_command
_.status_command
_.requeue_command
_.wait_command
_.up_command
_.demo_command
_.broker_command
_.hook_command
_.config_command
_.acl_command
_.glidein_command
_.completion_command

# In-process hook functions called by name: hooks/inprocess.py prepare_modules
# calls `prepare_fork` and `prepare_standby` of a hook module; the rehearsal's
# prepare hook is the spec `python:fetchwork.starter.rehearsal:nothing`.
_.prepare_fork
_.prepare_standby
_.nothing

# Protocols: a prometheus_client Collector's `collect`; the context manager's
# `__exit__(kind, value, traceback)` (starter/outcomes.py).
_.collect
_.traceback

# Attributes a library reads: rich's Column (submit/tables.py hold_table).
_.no_wrap
_.overflow

# Enum members named for their codes (HTCondor's JobStatus 6, HoldReasonCode 3):
# ads and the Lua scripts carry the numbers.
_.TRANSFERRING_OUTPUT
_.JOB_POLICY

# The pure statement of a rule a Lua script applies, tested without Redis; the
# script's comment names it (claim.lua: the activation check, the PS re-check).
_.needs_activation
_.start_refusal

# Used by the benchmarks (bench/scheduling_bench.py).
_.blocked_ids
_.from_text

# The rehearsal's length, which its tests compare with the steps it ran.
_.step_count

# What a result or a client records for the tests to read: the filter that
# decided an activation, the jobs a periodic pass looked at, the times a
# cluster client followed its slot, the backfill leader's last plan; and the
# reset of the reference hooks' process-wide client between tests.
_.decided_by
_.looked_at
_.moves
_.last_plan
_.reset_broker

# rq's Worker and Job read or call these (the rq bridge, hooks/rqbridge/): the
# worker's process title, queue class, address, horse and its kill, the job's
# server version and end, an execution's job.
_.procline
_.queue_class
_.ip_address
_._horse_pid
_.kill_horse
_.redis_server_version
_.ended_at
_._job


# File transfer's execute-side parts (transfer/cache.py, transfer/plugins.py):
# the API the starter's transfers call, and the typed fields of a plugin's
# report they read for the job's transfer statistics.
_.from_job
_.transfer_type
_.start_time
_.end_time

# The Python API (fetchwork/schedd.py): htcondor2's methods, which users' scripts
# call; the package's lazy attribute lookup (PEP 562); `fetchwork qedit`. (Schedd.act
# needs no entry: a person's client has an `act` the broker's client calls.)
_.clusterad
_.qedit_command
_.procad
_.retrieve
_.__getattr__

# File transfer's commands, loaded by name (fetchwork/cli.py COMMANDS).
_.transfer_data_command

# Signed batches stored once (lua/sigbatch.lua): the keys the Lua scripts build from
# the pool's prefix, named here for the tests, benches and ACL tests; and the Python
# twin of the claim's rebuilt signature (config/signedjob.py proof_text).
_.sig_counter
_.sig_batch
_.sig_jobs
_.proof_text

# The line a shared log formatter made, kept on the record (starter/logline.py).
_._fetchwork_line

# The output delivery's thread of a local pool, whose CPU bench/startd_bench.py counts.
_.delivery_thread
