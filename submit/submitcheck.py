"""condor_submit's warnings about a submit description: lines nothing used
(`executabel = ...`: "Is it a typo?") and commands HTCondor knows that
fetchwork does not do, listed in one warning. Pure: the file's definitions
and text in, warnings out, in line order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .jobpolicymap import POLICY_COMMANDS
from .transfermap import TRANSFER_COMMANDS

# Submit commands fetchwork reads (submitmap.py) or that steer the file itself.
USED_COMMANDS = frozenset({
    "universe", "executable", "transfer_executable", "arguments", "environment", "input",
    "output", "error", "initialdir", "initial_dir", "batch_name", "kill_sig", "request_cpus",
    "request_memory", "request_disk", "requirements", "rank", "priority", "job_lease_duration",
    "hold", "allowed_job_duration", "job_max_vacate_time", "accounting_group", "log",
    "depends_on", "run_until_canceled",
}) | POLICY_COMMANDS | TRANSFER_COMMANDS

# Commands condor_submit knows that fetchwork accepts and ignores (one warning lists them).
UNSUPPORTED_COMMANDS = frozenset({
    "log_xml", "dagman_log", "notification", "notify_user", "email_attributes",
    "encrypt_input_files", "encrypt_output_files", "dont_encrypt_input_files",
    "dont_encrypt_output_files", "getenv", "stream_input", "stream_output", "stream_error",
    "periodic_vacate", "retry_until", "request_gpus", "gpus_minimum_capability",
    "accounting_group_user", "concurrency_limits", "leave_in_queue", "nice_user",
    "deferral_time", "deferral_window", "deferral_prep_time", "coresize", "x509userproxy",
    "use_x509userproxy", "docker_image", "container_image", "max_idle",
    "max_materialize", "description", "job_machine_attrs", "job_ad_information_attrs",
    "want_graceful_removal", "max_job_retirement_time", "run_as_owner", "load_profile",
    "image_size", "noop_job", "noop_job_exit_code", "noop_job_exit_signal",
    "submit_event_notes", "keep_claim_idle", "hold_kill_sig", "remove_kill_sig",
    "kill_sig_timeout", "allowed_execute_duration", "want_checkpoint",
    "checkpoint_exit_code", "transfer_checkpoint_files", "next_job_start_delay",
    "skip_filechecks", "use_oauth_services", "copy_to_spool", "cron_minute", "cron_hour",
    "cron_day_of_month", "cron_month", "cron_day_of_week", "cron_window", "cron_prep_time",
    "buffer_size", "buffer_block_size", "want_remote_io", "manifest", "priority_boost",
})

# $(name), $(name:default), $F(name), $Fqn(name), $INT(name), $REAL(name), ...
_REFERENCE_RE = re.compile(r"\$[A-Za-z]*\(\s*([A-Za-z_][A-Za-z0-9_.]*)")
_DEFINED_RE = re.compile(r"^\s*(?:if|elif)\s+(?:!\s*)?defined\s+([A-Za-z_][A-Za-z0-9_.]*)",
                         re.I | re.M)


def referenced(text: str) -> set[str]:
    """Lower-case names a macro reference or an `if defined` test uses."""
    return ({match.lower() for match in _REFERENCE_RE.findall(text)}
            | {match.lower() for match in _DEFINED_RE.findall(text)})


def warnings(defined: Mapping[str, list[int]], lines: Sequence[str], text: str,
             source: str) -> list[str]:
    """The unused-line and unsupported-command warnings of a description, in line order.
    `defined` maps each lower-case command name to the lines that set it."""
    used = referenced(text)
    found: list[tuple[int, str]] = []
    unsupported: list[tuple[int, str]] = []
    for name, numbers in defined.items():
        if name.startswith("my.") or name in USED_COMMANDS or name in used:
            continue
        if name in UNSUPPORTED_COMMANDS:
            unsupported.append((numbers[0], name))
            continue
        for number in numbers:
            line = lines[number - 1].strip() if number <= len(lines) else name
            found.append((number, f"{source}:{number}: the line '{line}' was unused by "
                                  "fetchwork submit. Is it a typo?"))
    if unsupported:
        unsupported.sort()
        listed = ", ".join(f"{name} (line {number})" for number, name in unsupported)
        found.append((unsupported[0][0], f"{source}: these commands are not supported by "
                                         f"fetchwork and were ignored: {listed}"))
    return [message for _number, message in sorted(found, key=lambda item: item[0])]
