"""What a slot's START reads of a job, worked out once per shape of slot ad."""

from __future__ import annotations

import psutil

from fetchwork.broker import autoclusters
from fetchwork.broker.autoclusters import start_job_reads
from fetchwork.config.ads import parse_ad

SLOT = ('Name = "slot1@m"\nMemory = 4096\nState = "{state}"\nMyCurrentTime = {now}\n'
        "Start = {start}\nPolicy = {policy}\n")


def slot(now: int = 100, state: str = "Unclaimed", start: str = "Policy",
         policy: str = "TARGET.RequestMemory <= Memory") -> object:
    return parse_ad(SLOT.format(now=now, state=state, start=start, policy=policy))


def test_the_reads_follow_start_and_what_it_refers_to() -> None:
    assert start_job_reads(slot()) == {"requestmemory"}  # type: ignore[arg-type]
    assert start_job_reads(slot(now=101, state="Claimed")) == {"requestmemory"}  # type: ignore[arg-type]
    assert start_job_reads(slot(policy="TARGET.Owner == \"a\"")) == {"owner"}  # type: ignore[arg-type]
    assert start_job_reads(slot(start="TARGET.Cpus > 1 && Policy")) == {  # type: ignore[arg-type]
        "cpus", "requestmemory"}
    # A name the slot ad has is the slot's; one it lacks falls through to the job.
    assert start_job_reads(parse_ad(  # type: ignore[arg-type]
        'Name = "s"\nStart = Memory > 1\n')) == {"memory"}


def test_a_value_over_several_lines_is_read_without_the_kept_reads() -> None:
    ad = parse_ad('Name = "s"\nNote = "two\\nlines"\nStart = TARGET.Owner == Note\n')
    assert start_job_reads(ad) == {"owner"}  # type: ignore[arg-type]
    assert autoclusters._start_key(ad, frozenset({"name", "note", "start"})) is None  # type: ignore[arg-type]


def test_new_clocks_and_states_do_not_grow_the_process() -> None:
    ads = [slot(now=1000 + index, state=("Unclaimed", "Claimed")[index % 2])
           for index in range(4000)]
    me = psutil.Process()
    for ad in ads[:200]:
        start_job_reads(ad)  # type: ignore[arg-type]
    before_kb = me.memory_info().rss // 1024
    for ad in ads[200:]:
        start_job_reads(ad)  # type: ignore[arg-type]
    # An ExprTree read out of each ad would keep some 0.5 MB here.
    assert me.memory_info().rss // 1024 - before_kb < 256
