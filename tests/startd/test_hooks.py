"""The startd's hook protocol end to end: a real startd, real hooks, real starters.

One startd per hook form (programs, in-process `python:` hooks) runs with
`--once` over two slots with different keywords, as in the reference text's
DATABASE/WEB example; the tests then read what the hooks recorded.
"""

from __future__ import annotations

import pytest

from fetchwork.config import ads
from tests.support.startd import QUEUE_DELAY, Pool, pool_root

MODES = ["program", "python"]


@pytest.fixture(scope="module", params=MODES)
def run(request):
    with pool_root(f"hooks-{request.param}") as root:
        yield from _run(Pool(root, request.param))


def _run(pool: Pool):
    pool.write_config(f"""
        NUM_SLOTS = 2
        STARTD_JOB_HOOK_KEYWORD = DATABASE
        SLOT2_JOB_HOOK_KEYWORD = WEB
        FetchWorkDelay = {QUEUE_DELAY}
        STARTD_ATTRS = Site
        Site = "test-site"
        SLOT2_Site = "web-site"
    """ + pool.keyword_config("DATABASE") + pool.keyword_config("WEB"))
    jobs = {
        "db1": pool.add_job("DATABASE", cmd="/bin/echo", args="hello", text="Owner = \"ann\"\n"
                            "Unknown_Attr = {1, 2}\n"),
        "db2": pool.add_job("DATABASE", cmd="/bin/sleep", args="0.2"),
        "web1": pool.add_job("WEB", cmd="/bin/true"),
    }
    # Garbage, then an ad without Cmd: both rejected.
    (pool.jobs_dir / "WEB" / "90000").write_text("this is not a ClassAd at all\n")
    (pool.jobs_dir / "WEB" / "90001").write_text('Owner = "nobody-knows"\nClusterId = 77\n'
                                                 "ProcId = 0\n")
    proc = pool.start("--once", "--name", "testhost")
    status = proc.wait(60)
    pool.status = status
    pool.jobs = jobs
    yield pool


def by_slot(pool: Pool, kind: str, keyword: str):
    return [call for call in pool.calls(kind) if call.args and call.args[0] == keyword]


def test_once_exits_zero_after_the_work_runs_out(run):
    assert run.status == 0, run.log_text()[-3000:]


def test_fetch_hook_gets_the_slot_ad_on_stdin(run):
    call = run.calls("fetch")[0]
    ad = ads.parse_ad(call.stdin)
    assert ad["Name"] in ("slot1@testhost", "slot2@testhost")
    assert ad["State"] == "Unclaimed" and ad["Activity"] == "Idle"
    for name in ("SlotID", "Machine", "Cpus", "Memory", "Disk", "OpSys", "Arch", "LoadAvg",
                 "TotalSlots", "EnteredCurrentState", "Start", "Rank"):
        assert name in ad


def test_startd_attrs_take_per_slot_values(run):
    sites = {ads.parse_ad(c.stdin)["Name"]: ads.parse_ad(c.stdin)["Site"]
             for c in run.calls("fetch")}
    assert sites == {"slot1@testhost": "test-site", "slot2@testhost": "web-site"}


def test_fetch_hook_gets_no_arguments_but_its_configured_ones(run):
    assert {tuple(call.args) for call in run.calls("fetch")} == {("DATABASE",), ("WEB",)}


def test_each_slot_uses_its_own_keyword(run):
    names = {kw: {ads.parse_ad(c.stdin)["Name"] for c in by_slot(run, "fetch", kw)}
             for kw in ("DATABASE", "WEB")}
    assert names == {"DATABASE": {"slot1@testhost"}, "WEB": {"slot2@testhost"}}


def test_every_job_ran_and_its_exit_hook_saw_exit(run):
    exits = run.calls("exit")
    assert sorted(ads.parse_ad(c.stdin)["ClusterId"] for c in exits) == [1, 2, 3]
    assert all(c.args[-1] == "exit" for c in exits)


def test_hook_keyword_is_inserted_into_the_job_ad(run):
    for call in run.calls("exit"):
        ad = ads.parse_ad(call.stdin)
        assert ad["HookKeyword"] == call.args[0]


def test_unknown_job_attributes_reach_the_starter_hooks(run):
    db1 = [ads.parse_ad(c.stdin) for c in run.calls("exit")
           if ads.parse_ad(c.stdin)["ClusterId"] == 1][0]
    assert db1["Owner"] == "ann"
    assert ads.unparse(db1.lookup("Unknown_Attr")).replace(" ", "") == "{1,2}"


def test_accept_reply_carries_job_ad_separator_slot_ad_and_claim_id(run):
    accepts = [c for c in run.calls("reply") if c.args[-1] == "accept"]
    assert len(accepts) == 3
    for call in accepts:
        assert "\n-----\n" in call.stdin
        job_ad, slot_ad = ads.split_pair(call.stdin)
        assert "Cmd" in job_ad and slot_ad is not None and "Name" in slot_ad
        assert isinstance(job_ad["ClaimId"], str) and job_ad["ClaimId"]


def test_claim_is_reused_for_the_next_job(run):
    db = [ads.split_pair(c.stdin)[0] for c in by_slot(run, "reply", "DATABASE")]
    assert [ad["ClusterId"] for ad in db] == [1, 2]
    assert db[0]["ClaimId"] == db[1]["ClaimId"]
    second_slot_ad = ads.split_pair(by_slot(run, "reply", "DATABASE")[1].stdin)[1]
    assert (second_slot_ad["State"], second_slot_ad["Activity"]) == ("Claimed", "Idle")


def test_garbage_and_ads_without_cmd_are_rejected(run):
    rejects = [c for c in run.calls("reply") if c.args[-1] == "reject"]
    assert len(rejects) == 2
    assert all(c.args[0] == "WEB" for c in rejects)
    assert all("ClaimId" not in ads.split_pair(c.stdin)[0] for c in rejects)
    log = run.log_text()
    assert "not a ClassAd" in log and "no Cmd" in log
    # The rejected ad without Cmd still reaches the reply hook as fetched.
    assert any(ads.split_pair(c.stdin)[0].get("ClusterId") == 77 for c in rejects)


def test_claim_is_evicted_when_the_work_runs_out(run):
    evicts = run.calls("evict")
    assert sorted(c.args[0] for c in evicts) == ["DATABASE", "WEB"]
    for call in evicts:
        job_ad, slot_ad = ads.split_pair(call.stdin)
        assert "ClaimId" in job_ad and slot_ad is not None
    db_evict = by_slot(run, "evict", "DATABASE")[0]
    assert ads.split_pair(db_evict.stdin)[0]["ClusterId"] == 2


def test_slot_returns_to_unclaimed_after_eviction(run):
    last = by_slot(run, "fetch", "DATABASE")[-1]
    assert ads.parse_ad(last.stdin)["State"] in ("Claimed", "Unclaimed")
    log = run.log_text()
    assert "slot1: Preempting/Vacating -> Owner/Idle" in log
    assert log.rindex("slot1: Owner/Idle -> Unclaimed/Idle") > log.index("no more work")


def test_log_file_in_log_directory(run):
    text = (run.root / "log" / "StartLog").read_text()
    assert "slot1" in text and "accepted" in text


def test_a_job_that_ends_well_is_one_line_per_state_change(run):
    """As HTCondor's StartLog: the fetch's verdict, the move to Busy naming the
    starter, the job's pid, the move back to Idle saying how the job and its
    starter ended (and the claim's start, for a claim's first job). An in-process
    hook that succeeded is no line of its own (a program's run still is); a
    job's exit is said by the move to Idle."""
    log = run.log_text()
    quiet = run.mode == "python"
    assert ("_HOOK_FETCH_WORK" not in log) is quiet and ("_HOOK_REPLY_FETCH" not in log) is quiet
    for cluster in (1, 2, 3):
        lines = [line.split(": ", 1)[1] for line in log.splitlines()
                 if f"job {cluster}." in line and "(claimed for job" not in line]
        kinds = [
            "fetch hook took" in lines[0] and "accepted" in lines[0],
            "Claimed/Idle -> Claimed/Busy (starter " in lines[1],
            " started, pid " in lines[2],
            "Claimed/Busy -> Claimed/Idle (job " in lines[3] and " ended; starter " in lines[3]
            and "with status 0 (job exit)" in lines[3],
        ]
        assert len(lines) == 4 and all(kinds), lines


def test_a_jobs_start_is_told_in_the_order_it_happened(run):
    """The fetch's verdict, then the claim's start (for a claim's first job), then
    the move to Busy: held back until the starter has the job (that they come
    after the hand-over is test_zygote's), they keep their order."""
    lines = [line.split(": ", 1)[1] for line in run.log_text().splitlines()
             if ": slot" in line]
    claims = 0
    for cluster in (1, 2, 3):
        [at] = [index for index, line in enumerate(lines)
                if f"job {cluster}.0 accepted" in line]
        label = lines[at].split(":", 1)[0]
        own = [line.split(": ", 1)[1] for line in lines[at + 1:]
               if line.startswith(label + ": ")][:2]
        if own[0].endswith(f"-> Claimed/Idle (claimed for job {cluster}.0)"):
            claims += 1
            own = own[1:]
        assert own[0].startswith("Claimed/Idle -> Claimed/Busy (starter "), (cluster, own)
    assert claims >= 1

