"""The pure parts of slots: SLOT_TYPE knobs, carving dynamic slots, the resource and
exclusive match rule, the slot ad's kind and resources, and what the starter enforces."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fetchwork.config import ads
from fetchwork.config.loader import Config
from fetchwork.config.matching import mismatch, requested, resource_refusal
from fetchwork.config.protocol import HoldCode
from fetchwork.config.resources import Resources
from fetchwork.errors import ConfigError
from fetchwork.startd import acceptance
from fetchwork.startd.acceptance import Verdict
from fetchwork.startd.settings import SlotHooks
from fetchwork.startd.slots.carving import Carving, index_in
from fetchwork.startd.slots.mips import measure_mips, mips_of
from fetchwork.startd.slots.partitionable import CarveError, Partition, affinity, core_ranges
from fetchwork.startd.slots.slot import Claim, Slot
from fetchwork.startd.slots.slottypes import (
    SlotType,
    even_split,
    machine_resources,
    parse_slot_type,
    read_slot_types,
    resolve,
)
from fetchwork.startd.states import Activity, SlotStatus, State
from fetchwork.starter import limits

MACHINE = Resources(16, 16000, 1_000_000)
HOOKS = SlotHooks("Q", None, None, None)


def ad(text: str):
    return ads.parse_ad(text)


# -- SLOT_TYPE_<N> -------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("cpus=100%, memory=100%", {"cpus": Fraction(1), "memory": Fraction(1), "disk": None}),
    ("cpus=4 mem=2G disk=1/4", {"cpus": 4, "memory": 2048, "disk": Fraction(1, 4)}),
    ("c=2, ram=512, d=10M", {"cpus": 2, "memory": 512, "disk": 10240}),
    ("cpus = 1, memory = 50%, swap = 1/4", {"cpus": 1, "memory": Fraction(1, 2), "disk": None}),
    ("25%", {"cpus": Fraction(1, 4), "memory": Fraction(1, 4), "disk": Fraction(1, 4)}),
    ("", {"cpus": None, "memory": None, "disk": None}),
    ("cpus=auto, memory=1024", {"cpus": None, "memory": 1024, "disk": None}),
])
def test_slot_type_syntax(text, expected):
    assert parse_slot_type(text, "SLOT_TYPE_1") == expected


@pytest.mark.parametrize("text, says", [
    ("cpus=lots", "cpus='lots' is not an amount"),
    ("gpus=1", "resource cpus, memory or disk"),
    ("cpus=0", "must be more than zero"),
    ("memory=150%", "percentage in (0, 100]"),
    ("cpus=3/2", "fraction in (0, 1]"),
    ("cpus=2G", "is not an amount"),
    ("4", "a single value must be a share"),
])
def test_bad_slot_types_name_the_knob(text, says):
    with pytest.raises(ConfigError) as caught:
        parse_slot_type(text, "SLOT_TYPE_2")
    assert "SLOT_TYPE_2" in str(caught.value) and says in str(caught.value)


def test_types_resolve_in_order_with_auto_sharing_the_rest():
    types = [SlotType(1, parse_slot_type("cpus=8, memory=50%", "k"), 1, True),
             SlotType(2, parse_slot_type("", "k"), 2, False)]
    specs = resolve(types, MACHINE)
    assert [(s.slot_id, s.type_id, s.partitionable) for s in specs] == [
        (1, 1, True), (2, 2, False), (3, 2, False)]
    assert specs[0].size == Resources(8, 8000, 333_333)
    assert specs[1].size == specs[2].size == Resources(4, 4000, 333_333)


def test_types_asking_more_than_the_machine_are_refused():
    types = [SlotType(1, parse_slot_type("cpus=12", "k"), 2, False)]
    with pytest.raises(ConfigError, match="SLOT_TYPE_1: the slots ask for 24 .*NUM_CPUS"):
        resolve(types, MACHINE)


def test_static_slots_split_evenly():
    assert [s.size for s in even_split(4, MACHINE)] == [Resources(4, 4000, 250_000)] * 4


def test_knobs_read_from_the_configuration():
    config = Config.from_text("NUM_CPUS = 16\nMEMORY = 2000\nSLOT_TYPE_1 = cpus=100%\n"
                              "SLOT_TYPE_1_PARTITIONABLE = True\nNUM_SLOTS_TYPE_1 = 1\n"
                              "SLOT_TYPE_3 = cpus=1\nNUM_SLOTS_TYPE_3 = 0\n", "cfg")
    (only,) = read_slot_types(config)
    assert (only.type_id, only.count, only.partitionable) == (1, 1, True)
    assert machine_resources(config, 5) == Resources(16, 2000, 5)
    assert read_slot_types(Config.from_text("NUM_SLOTS = 2\n", "cfg")) == []


@pytest.mark.parametrize("text, knob", [
    ("NUM_CPUS = many\nMEMORY = 1\n", "NUM_CPUS"),
    ("NUM_CPUS = 0\nMEMORY = 1\n", "NUM_CPUS"),
    ("NUM_CPUS = 2\nMEMORY = -5\n", "MEMORY"),
])
def test_bad_machine_knobs_are_named(text, knob):
    with pytest.raises(ConfigError, match=knob):
        machine_resources(Config.from_text(text, "cfg"), 0)


def test_bad_slot_counts_and_flags_are_named():
    for text, knob in (("NUM_SLOTS_TYPE_1 = two\n", "NUM_SLOTS_TYPE_1"),
                       ("NUM_SLOTS_TYPE_1 = 1\nSLOT_TYPE_1_PARTITIONABLE = maybe\n",
                        "SLOT_TYPE_1_PARTITIONABLE")):
        with pytest.raises(ConfigError, match=knob):
            read_slot_types(Config.from_text(text, "cfg"))


# -- carving -------------------------------------------------------------------

def test_carving_takes_the_lowest_free_number_and_cores_and_gives_them_back():
    part = Partition(Resources(16, 1000, 100), tuple(range(16)))
    big = part.carve(Resources(8, 400, 10))
    ones = [part.carve(Resources(1, 10, 0)) for _ in range(8)]
    assert big.index == 1 and big.cores == tuple(range(8))
    assert [c.index for c in ones] == list(range(2, 10))
    assert [c.cores for c in ones] == [(core,) for core in range(8, 16)]
    assert part.free == Resources(0, 520, 90) and part.exhausted()
    with pytest.raises(CarveError):
        part.carve(Resources(1, 1, 0))
    assert part.release(3) is not None and part.release(3) is None
    assert part.free == Resources(1, 530, 90) and not part.exhausted()
    again = part.carve(Resources(1, 10, 0))
    assert (again.index, again.cores) == (3, (9,))


def test_a_carve_may_ask_for_its_number():
    part = Partition(Resources(4, 100, 0), (0, 1, 2, 3))
    assert part.carve(Resources(1, 1, 0), index=5).index == 5
    assert part.next_index() == 1
    with pytest.raises(CarveError):
        part.carve(Resources(1, 1, 0), index=5)


def test_cores_wrap_onto_the_machine():
    assert core_ranges([2, 3]) == [(0, 1), (2, 3, 4)]
    assert affinity(range(8), [0, 1]) == (0, 1)
    assert affinity((5,), [0, 1]) == (1,)
    assert affinity((2, 3), [0, 2, 4, 6]) == (4, 6)


def test_the_dynamic_slot_number_comes_from_remote_host():
    assert index_in("slot1_3@alpha", 1) == 3
    assert index_in("slot2_3@alpha", 1) is None
    assert index_in(None, 1) is None


# -- the match rule --------------------------------------------------------------

def test_requests_default_as_in_htcondor():
    assert requested(ad("Cmd = \"x\"\n")) == (1, 1, 0)
    assert requested(ad("ImageSize = 3000\nDiskUsage = 7\n")) == (1, 3, 7)
    assert requested(ad("RequestCpus = 8\nRequestMemory = 2 * 1024\nRequestDisk = 5\n")) == \
        (8, 2048, 5)
    slot = ad("Cpus = 3\n")
    assert requested(ad("RequestCpus = TARGET.Cpus\n"), slot) == (3, 1, 0)


@pytest.mark.parametrize("slot_text, job_text, says", [
    ("Cpus = 8\nMemory = 100\nDisk = 10\n", "RequestCpus = 8\nRequestMemory = 100\n", None),
    ("Cpus = 7\n", "RequestCpus = 8\n", "RequestCpus 8 CPU(s) is more than the slot's Cpus 7"),
    ("Memory = 99\n", "RequestMemory = 100\n", "RequestMemory 100 MB"),
    ("Disk = 1\n", "RequestDisk = 2\n", "RequestDisk 2 KB"),
    ("Name = \"s\"\n", "RequestCpus = 64\n", None),  # a slot that says nothing sets no limit
    ("FetchworkRunningJobs = 1\n", "Exclusive = true\n", "the job is exclusive"),
    ("FetchworkRunningJobs = 0\n", "Exclusive = true\n", None),
    ("FetchworkRunningJobs = 1\n", "Exclusive = false\n", None),
    ("FetchworkExclusive = true\n", "RequestCpus = 1\n", "an exclusive job runs"),
])
def test_resources_and_exclusivity(slot_text, job_text, says):
    refusal = resource_refusal(ad(slot_text), ad(job_text))
    assert (refusal is None) if says is None else (says in refusal)
    assert mismatch(ad(slot_text), ad(job_text)) == refusal


def test_a_job_that_no_longer_fits_is_rejected_by_the_startd():
    now = SlotStatus(State.UNCLAIMED, Activity.IDLE, 0.0, 0.0)
    slot = ad("Cpus = 2\nMemory = 100\nFetchworkRunningJobs = 1\nStart = true\n")
    assert acceptance.decide(now, slot, ad("RequestCpus = 2\n"), None).verdict is Verdict.ACCEPT
    late = acceptance.decide(now, slot, ad("RequestCpus = 4\n"), None)
    assert late.verdict is Verdict.REJECT and "RequestCpus 4" in late.reason
    excl = acceptance.decide(now, slot, ad("Exclusive = true\n"), None)
    assert excl.verdict is Verdict.REJECT and "exclusive" in excl.reason


# -- slot ads --------------------------------------------------------------------

def _carving(assign: bool = True) -> tuple[Carving, list[Slot]]:
    types = [SlotType(1, parse_slot_type("cpus=12, memory=50%", "k"), 1, True),
             SlotType(2, parse_slot_type("cpus=2", "k"), 2, False)]
    carving = Carving(resolve(types, MACHINE), MACHINE, 42, assign, "alpha", cores=[0, 1])
    slots = [Slot(n, f"slot{n}@alpha", HOOKS,
                  status=SlotStatus(State.UNCLAIMED, Activity.IDLE, 0.0, 0.0))
             for n in (1, 2, 3)]
    return carving, slots


def _ad_of(carving: Carving, slot: Slot, slots: list[Slot]):
    slot_ad = ad(f"Name = \"{slot.name}\"\nMachine = \"alpha\"\n")
    carving.decorate(slot, slot_ad, slots)
    return slot_ad


def test_slot_ads_say_kind_free_and_total_resources():
    carving, slots = _carving()
    pslot = _ad_of(carving, slots[0], slots)
    assert (pslot["SlotType"], pslot["PartitionableSlot"], pslot["DynamicSlot"]) == (
        "Partitionable", True, False)
    assert (pslot["Cpus"], pslot["Memory"], pslot["TotalSlotCpus"]) == (12, 8000, 12)
    assert (pslot["TotalCpus"], pslot["TotalMemory"], pslot["Mips"]) == (16, 16000, 42)
    assert pslot["FetchworkDynamicSlotName"] == "slot1_1@alpha"
    assert (pslot["FetchworkRunningJobs"], pslot["FetchworkExclusive"]) == (0, False)
    static = _ad_of(carving, slots[2], slots)
    assert (static["SlotType"], static["Cpus"], static["CpuAffinity"]) == ("Static", 2, "0,1")
    job = ad("RequestCpus = 4\nRequestMemory = 1000\nRemoteHost = \"slot1_7@alpha\"\n")
    dslot = carving.take(slots[0], job, pslot, slots)
    assert dslot.name == "slot1_7@alpha" and dslot.label == "slot1_7" and dslot in slots
    assert slots[0].clock.due_now, "the p-slot fetches again at once"
    dad = _ad_of(carving, dslot, slots)
    assert (dad["Name"], dad["SlotType"], dad["DynamicSlot"], dad["Cpus"]) == (
        "slot1_7@alpha", "Dynamic", True, 4)
    assert dad["CpuAffinity"] == "0,1"
    assert _ad_of(carving, slots[0], slots)["Cpus"] == 8
    assert not dslot.can_fetch


def test_running_and_exclusive_jobs_are_counted_and_stop_fetching():
    carving, slots = _carving()
    slots = [Slot(n, f"slot{n}@alpha", SlotHooks("Q", object(), None, None),  # type: ignore
                  status=SlotStatus(State.UNCLAIMED, Activity.IDLE, 0.0, 0.0))
             for n in (1, 2, 3)]
    assert carving.may_fetch(slots[1], slots)
    slots[1].claim = Claim("c", ad("Exclusive = true\n"), 0.0)
    slots[1].starter = object()  # type: ignore[assignment]
    assert carving.running_jobs(slots) == 1 and carving.exclusive_running(slots)
    assert _ad_of(carving, slots[2], slots)["FetchworkExclusive"] is True
    assert not any(carving.may_fetch(slot, slots) for slot in slots)
    carving.wake_after_exclusive(slots)
    slots[1].starter = None
    carving.wake_after_exclusive(slots)
    assert all(slot.clock.due_now for slot in slots)


def test_a_p_slot_with_nothing_free_does_not_fetch():
    carving, slots = _carving()
    slots[0].hooks = SlotHooks("Q", object(), None, None)  # type: ignore[arg-type]
    pslot = _ad_of(carving, slots[0], slots)
    carving.take(slots[0], ad("RequestCpus = 12\n"), pslot, slots)
    assert not carving.may_fetch(slots[0], slots) and not slots[0].clock.due_now
    parent = carving.drop(slots[-1], slots)
    assert parent is slots[0] and parent.clock.due_now and carving.may_fetch(parent, slots)
    assert len(slots) == 3


def test_mips_is_measured_quickly_or_configured():
    assert measure_mips() >= 1
    assert mips_of(Config.from_text("MIPS = 3000\n", "cfg")) == 3000
    with pytest.raises(ConfigError, match="MIPS"):
        mips_of(Config.from_text("MIPS = 0\n", "cfg"))


# -- what the starter enforces -----------------------------------------------------

def test_affinity_from_the_slot_ad():
    assert limits.cpu_affinity(ad("CpuAffinity = \"1,0,1\"\n")) == (0, 1)
    assert limits.cpu_affinity(ad("Cpus = 1\n")) is None
    assert limits.cpu_affinity(ad("CpuAffinity = \"x\"\n")) is None


def test_memory_over_the_request_is_reported_then_held():
    slot = ad("Name = \"slot1_2@alpha\"\n")
    job = ad("RequestMemory = 10\n")
    assert not limits.check_memory(job, slot, 5000, limits.HOLD_JOB)
    assert job["MemoryUsage"] == 5 and "MemoryExceeded" not in job
    assert limits.check_memory(job, slot, 20_000, limits.HOLD_JOB)
    assert job["MemoryExceeded"] is True
    assert job["HoldReasonCode"] == HoldCode.MEMORY_EXCEEDED == 34
    assert job["HoldReason"].startswith("Error from slot1_2@alpha: the job used 20 MB")
    assert not limits.check_memory(job, slot, 30_000, limits.HOLD_JOB), "held once"
    reported = ad("RequestMemory = 10\n")
    assert not limits.check_memory(reported, slot, 20_000, limits.REPORT)
    assert reported["MemoryExceeded"] is True and "HoldReason" not in reported
    assert not limits.check_memory(ad("Cmd = \"x\"\n"), slot, 10**6, limits.HOLD_JOB)


def test_the_memory_policy_knob():
    assert limits.memory_policy(Config.from_text("MEMORY_LIMIT_POLICY = Hold\n", "c")) == "hold"
    with pytest.raises(ConfigError, match="MEMORY_LIMIT_POLICY"):
        limits.memory_policy(Config.from_text("MEMORY_LIMIT_POLICY = kill\n", "c"))


def test_default_job_exclusive_applies_at_submit_to_jobs_that_do_not_say():
    from fetchwork.broker.store.jobads import prepare_submitted

    assert "Exclusive" not in prepare_submitted({"Cmd": "x"}, 0, 60).attrs
    assert prepare_submitted({"Cmd": "x"}, 0, 60, default_exclusive=True).attrs["Exclusive"]
    said = prepare_submitted({"Cmd": "x", "exclusive": False}, 0, 60, default_exclusive=True)
    assert said.attrs["exclusive"] is False and "Exclusive" not in said.attrs


def test_a_claim_counts_as_running_from_acceptance_to_the_end_of_its_job():
    carving, slots = _carving()
    static = slots[2]
    static.status = SlotStatus(State.CLAIMED, Activity.IDLE, 0.0, 0.0)
    static.claim = Claim("c", ad("Exclusive = true\n"), 0.0)
    assert carving.running_jobs(slots) == 1, "starting: the starter's ad counts its own job"
    assert _ad_of(carving, static, slots)["FetchworkExclusive"] is True
    static.claim.ended = True
    assert carving.running_jobs(slots) == 0 and not carving.exclusive_running(slots)
