"""The knobs the startd reads, converted once into typed values."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import classad2

from fetchwork.config import keywords
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError
from fetchwork.hooks.runner import HookSpec, resolve_hook
from fetchwork.startd.fetchdelay import DEFAULT_FETCH_DELAY_S
from fetchwork.startd.running import RunningPolicy
from fetchwork.startd.slots.slotad import SlotPolicy, read_policy
from fetchwork.startd.slots.slottypes import SlotType, machine_resources, read_slot_types

log = logging.getLogger(__name__)

# Knobs that no longer mean anything, and why: a site that still sets one is told so.
RETIRED_KNOBS = {
    "STARTER_ZYGOTE": "every starter is forked from the starter zygote; there is no other "
                      "way to start one",
}


@dataclass(frozen=True)
class SlotHooks:
    """A slot's keyword and the hooks the startd itself runs."""

    keyword: str | None
    fetch: HookSpec | None
    reply: HookSpec | None
    evict: HookSpec | None
    withdraw: HookSpec | None = None   # <KEYWORD>_HOOK_WITHDRAW_SLOT, run as the startd exits


@dataclass(frozen=True)
class StartdSettings:
    num_slots: int
    execute_dir: str
    log_dir: str
    fetch_delay: classad2.ExprTree | str
    fetch_min_interval_s: float
    policies: Mapping[int, SlotPolicy]   # by slot number
    running: RunningPolicy
    max_vacate_s: float
    killing_timeout_s: float
    shutdown_grace_s: float
    fast_shutdown_grace_s: float
    polling_interval_s: float
    starter_standby: int
    slot_types: tuple[SlotType, ...] = ()   # empty: NUM_SLOTS even static slots
    assign_cpu_affinity: bool = False
    starter_jobs_per_process: int = 1   # jobs a starter runs before it is replaced

    @classmethod
    def from_config(cls, config: Config) -> StartdSettings:
        slot_types = tuple(read_slot_types(config))
        num_slots = sum(t.count for t in slot_types) or config.get_int("NUM_SLOTS")
        if num_slots < 1:
            raise ConfigError(f"NUM_SLOTS must be at least 1, not {num_slots}")
        delay_text = (config.get("FetchWorkDelay") or "").strip()
        for name in ("START", "RANK"):
            _expr_text(config, name)  # errors name the file and line now, not later
        if slot_types:
            machine_resources(config, 0)  # NUM_CPUS and MEMORY checked now
        for warning in retired_knobs(config):
            log.warning("%s", warning)
        return cls(
            num_slots=num_slots,
            execute_dir=config.require("EXECUTE"),
            log_dir=config.require("LOG"),
            # HTCondor: an empty FetchWorkDelay means its default of 300 s.
            fetch_delay=(config.get_expr("FetchWorkDelay") if delay_text
                         else repr(DEFAULT_FETCH_DELAY_S)),
            fetch_min_interval_s=config.get_duration_s("FETCH_WORK_MIN_INTERVAL"),
            policies={n: read_policy(config, n) for n in range(1, num_slots + 1)},
            running=RunningPolicy(
                want_suspend=_expr_text(config, "WANT_SUSPEND"),
                suspend=_expr_text(config, "SUSPEND"),
                continue_=_expr_text(config, "CONTINUE"),
                preempt=_expr_text(config, "PREEMPT")),
            # HTCondor writes this one as an expression (`10 * 60`).
            max_vacate_s=config.get_float("MachineMaxVacateTime"),
            killing_timeout_s=config.get_duration_s("KILLING_TIMEOUT"),
            shutdown_grace_s=config.get_duration_s("STARTD_SHUTDOWN_GRACE"),
            fast_shutdown_grace_s=config.get_duration_s("STARTD_FAST_SHUTDOWN_GRACE"),
            polling_interval_s=config.get_duration_s("POLLING_INTERVAL"),
            starter_standby=config.get_int("STARTER_STANDBY"),
            slot_types=slot_types,
            assign_cpu_affinity=config.get_bool("ASSIGN_CPU_AFFINITY"),
            starter_jobs_per_process=_jobs_per_process(config),
        )


def retired_knobs(config: Config) -> list[str]:
    """A warning for each knob of RETIRED_KNOBS the configuration sets, naming
    where it is set (the knob is ignored)."""
    warnings = []
    for name, why in RETIRED_KNOBS.items():
        definition = config.where(name)
        if definition is None:
            continue
        where = definition.source if definition.line is None \
            else f"{definition.source}, line {definition.line}"
        warnings.append(f"{name} ({where}) no longer means anything and is ignored: {why}; "
                        "remove it from the configuration")
    return warnings


def _jobs_per_process(config: Config) -> int:
    """STARTER_JOBS_PER_PROCESS, at least 1."""
    value = config.get_int("STARTER_JOBS_PER_PROCESS")
    if value < 1:
        where = config.where("STARTER_JOBS_PER_PROCESS")
        source = f" ({where.source}" + (f", line {where.line})" if where and where.line
                                         else ")") if where else ""
        raise ConfigError(f"STARTER_JOBS_PER_PROCESS{source} must be at least 1 (1: a new "
                          f"starter process for every job), not {value}")
    return value


def _expr_text(config: Config, name: str) -> str:
    """An expression knob's text, checked; empty means undefined (false)."""
    text = (config.get(name) or "").strip()
    if text:
        config.get_expr(name)  # a ConfigError naming the file and line if it does not parse
    return text


def slot_hooks(config: Config, slot_id: int) -> SlotHooks:
    """SLOT<N>_JOB_HOOK_KEYWORD else STARTD_JOB_HOOK_KEYWORD, and its startd hooks.

    As in HTCondor, the fetch hook is the one that must be defined: without it
    the slot never fetches and its other startd hooks never run.
    """
    keyword = keywords.slot_keyword(config, slot_id)
    fetch = resolve_hook(config, keyword, keywords.FETCH_WORK)
    return SlotHooks(
        keyword=keyword,
        fetch=fetch,
        reply=resolve_hook(config, keyword, keywords.REPLY_FETCH) if fetch else None,
        evict=resolve_hook(config, keyword, keywords.EVICT_CLAIM) if fetch else None,
        withdraw=resolve_hook(config, keyword, keywords.WITHDRAW_SLOT) if fetch else None,
    )


def keep_slots(new: StartdSettings, old: StartdSettings, config: Config) -> StartdSettings:
    """A reloaded configuration keeps the running startd's slots (NUM_SLOTS, SLOT_TYPE_<N>)."""
    if (new.num_slots, new.slot_types) == (old.num_slots, old.slot_types):
        return new
    log.warning("the slots changed (NUM_SLOTS, SLOT_TYPE_<N>); the startd keeps its %d "
                "slot(s) until it restarts", old.num_slots)
    return dataclasses.replace(new, num_slots=old.num_slots, slot_types=old.slot_types,
                               policies={n: read_policy(config, n)
                                         for n in range(1, old.num_slots + 1)})
