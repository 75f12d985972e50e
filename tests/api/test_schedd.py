"""fetchwork.Schedd on the test session's Redis (no daemons): each method's forms
as htcondor2 documents them, the answers' types and counts, and the errors,
which are fetchwork's with the command line's messages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import classad2
import htcondor2
import pytest

import fetchwork
from fetchwork.broker.connections.embedded import EmbeddedRedis
from fetchwork.config.ads import parse_ad
from fetchwork.errors import (
    AdError,
    EditError,
    FetchworkError,
    JobActionError,
    JobIdError,
    NoMatchingJobsError,
    RedisUnavailableError,
    SubmitFileError,
)

SLOT = parse_ad('Name = "slot1@api"\nMemory = 1000\nCpus = 1\nSTART = true\n')


@pytest.fixture
def schedd(redis_url: str, pool_name: str, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> fetchwork.Schedd:
    """A Schedd found as the command line finds the pool: from the environment."""
    monkeypatch.setenv("FETCHWORK_BROKER", redis_url)
    monkeypatch.setenv("FETCHWORK_POOL", pool_name)
    monkeypatch.setenv("FETCHWORK_CONFIG", os.devnull)
    monkeypatch.setenv("FETCHWORK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    return fetchwork.Schedd()


def ids_of(ads: list[classad2.ClassAd]) -> list[str]:
    return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads]


def args(schedd: fetchwork.Schedd, cluster: int) -> list[str]:
    """Each job's arguments (Arguments in the new syntax, Args in the old)."""
    return [ad.get("Arguments", ad.get("Args"))
            for ad in schedd.query(f"ClusterId == {cluster}", ["Args", "Arguments"])]


# -- construction -------------------------------------------------------------------

def test_a_url_and_a_pool_name_the_queue(schedd: fetchwork.Schedd, redis_url: str,
                                         pool_name: str) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}).cluster()
    other = fetchwork.Schedd(redis_url, pool=pool_name)
    assert ids_of(other.query(projection=["ClusterId", "ProcId"])) == [f"{cluster}.0"]
    assert fetchwork.Schedd(redis_url, pool=pool_name + "x").query() == []


def test_an_unreachable_broker_names_the_knob() -> None:
    with pytest.raises(RedisUnavailableError, match="FETCHWORK_BROKER"):
        fetchwork.Schedd("redis://127.0.0.1:1/0")


def test_a_located_daemon_ad_is_refused_with_the_reason() -> None:
    with pytest.raises(TypeError, match="no collector"):
        fetchwork.Schedd(classad2.ClassAd())  # type: ignore[arg-type]


def test_a_broker_lost_midway_is_a_fetchwork_error(tmp_path: Path, pool_name: str) -> None:
    server = EmbeddedRedis(tmp_path / "private")
    server.start()
    try:
        schedd = fetchwork.Schedd(server.url, pool=pool_name)
        schedd.submit({"executable": "/bin/true"})
    finally:
        server.stop()
    for call in (lambda: schedd.query(), lambda: schedd.act("Hold", "1"),
                 lambda: schedd.submit({"executable": "/bin/true"}),
                 lambda: schedd.edit("1.0", "A", "1"), lambda: schedd.history()):
        with pytest.raises(RedisUnavailableError):
            call()


# -- submit ---------------------------------------------------------------------------

def test_submit_takes_htcondor2s_submit_with_its_items_and_count(
        schedd: fetchwork.Schedd) -> None:
    sub = htcondor2.Submit('executable = /bin/echo\narguments = "$(item)"\n'
                           "queue 2 item from (\n  a b\n  c\n)\n")
    result = schedd.submit(sub)
    assert (result.first_proc(), result.num_procs()) == (0, 4)
    assert args(schedd, result.cluster()) == ["a b", "a b", "c", "c"]
    again = schedd.submit(sub, count=1)
    assert args(schedd, again.cluster()) == ["a b", "c"]


def test_itemdata_of_dicts_keeps_commas_and_spaces(schedd: fetchwork.Schedd) -> None:
    sub = htcondor2.Submit({"executable": "/bin/echo", "arguments": '"$(x) $(y)"'})
    result = schedd.submit(sub, itemdata=iter([{"x": "1", "y": "a,b"}, {"x": "2", "y": "c d"}]))
    assert args(schedd, result.cluster()) == ["1 a,b", "2 c d"]
    with_count = schedd.submit(sub, count=2, itemdata=iter([{"x": "3", "y": "z"}]))
    assert args(schedd, with_count.cluster()) == ["3 z", "3 z"]


def test_itemdata_of_strings_sets_item(schedd: fetchwork.Schedd) -> None:
    result = schedd.submit({"executable": "/bin/echo", "arguments": "$(item)"},
                           itemdata=["one", "two", "three"])
    assert args(schedd, result.cluster()) == ["one", "two", "three"]


def test_no_items_and_an_explicit_queue(schedd: fetchwork.Schedd) -> None:
    assert schedd.submit({"executable": "/bin/true"}, count=3, itemdata=None).num_procs() == 3
    assert schedd.submit({"executable": "/bin/true"}, queue="queue 2").num_procs() == 2
    with pytest.raises(SubmitFileError, match="mutually exclusive"):
        schedd.submit({"executable": "/bin/true"}, count=2, queue="2")
    with pytest.raises(SubmitFileError, match="queues no jobs"):
        schedd.submit({"executable": "/bin/true"}, itemdata=iter([]))


def test_submit_text_goes_through_as_the_command_line_reads_it(
        schedd: fetchwork.Schedd) -> None:
    text = ("executable = /bin/echo\narguments = first\nqueue\n"
            "arguments = second\nqueue 2\n")
    result = schedd.submit(text)
    assert args(schedd, result.cluster()) == ["first", "second", "second"]
    assert schedd.submit("executable = /bin/true\n").num_procs() == 1  # no queue: one job
    ad = result.procad(1)
    assert ad.get("Args", ad.get("Arguments")) == "second"
    assert result.clusterad()["Cmd"] == "/bin/echo"


def test_a_bad_description_names_its_line(schedd: fetchwork.Schedd) -> None:
    with pytest.raises(SubmitFileError, match=r"<submit description>:2: .*not an executable"):
        schedd.submit("request_cpus = 1\nexecutable = /no/such/program\nqueue\n")
    assert schedd.query() == []
    with pytest.raises(TypeError):
        schedd.submit(42)  # type: ignore[arg-type]


def test_description_warnings_are_python_warnings(schedd: fetchwork.Schedd) -> None:
    with pytest.warns(UserWarning, match="executabel = x' was unused"):
        result = schedd.submit("executable = /bin/true\nexecutabel = x\nqueue\n")
    assert result.num_procs() == 1


def test_spool_keeps_the_outputs_in_the_pool_and_sends_the_inputs_now(
        schedd: fetchwork.Schedd, tmp_path: Path) -> None:
    (tmp_path / "data.in").write_text("sent with the submission\n")
    result = schedd.submit({"executable": "/bin/cat", "arguments": "data.in",
                            "should_transfer_files": "YES",
                            "transfer_input_files": "data.in", "output": "cat.out"},
                           spool=True)
    (tmp_path / "data.in").unlink()  # the pool holds its own copy now
    assert schedd.spool(result) is None  # inputs already went with submit()
    [ad] = schedd.query(f"ClusterId == {result.cluster()}",
                        ["FetchworkSpool", "TransferInput"])
    assert ad["FetchworkSpool"] is True and ad["TransferInput"] == "data.in"
    with pytest.raises(TypeError):
        schedd.spool("12.0")  # type: ignore[arg-type]


def test_retrieve_passes_over_jobs_with_nothing_to_fetch(schedd: fetchwork.Schedd) -> None:
    result = schedd.submit({"executable": "/bin/true"})
    assert schedd.retrieve(f"{result.cluster()}.0") is None
    assert schedd.retrieve(f"ClusterId == {result.cluster()}") is None
    assert schedd.query(f"ClusterId == {result.cluster()}", ["ProcId"]) != []


# -- query and history ------------------------------------------------------------------

def test_query_projections_constraints_limits_and_callbacks(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true", "+Size": "$(Process)"},
                            count=4).cluster()
    whole = schedd.query()
    assert len(whole) == 4 and all(isinstance(ad, classad2.ClassAd) for ad in whole)
    assert whole[0]["JobStatus"] == 1 and whole[0]["Cmd"] == "/bin/true"
    small = schedd.query("Size < 2", ["ProcId", "Size", "NoSuchAttr"])
    assert [dict(ad.items()) for ad in small] == [{"ProcId": 0, "Size": 0},
                                                    {"ProcId": 1, "Size": 1}]
    expr = schedd.query(classad2.ExprTree(f"ClusterId == {cluster} && Size >= 2"), ["ProcId"])
    assert [ad["ProcId"] for ad in expr] == [2, 3]
    assert len(schedd.query(projection=["ProcId"], limit=3)) == 3
    called = schedd.query(projection=["ProcId"],
                          callback=lambda ad: ad["ProcId"] if ad["ProcId"] % 2 else None)
    assert called == [1, 3]
    with pytest.raises(FetchworkError, match="QueryOpt.Default"):
        schedd.query(opts=htcondor2.QueryOpt.SummaryOnly)


def test_a_bad_constraint_has_the_command_lines_message(schedd: fetchwork.Schedd) -> None:
    schedd.submit({"executable": "/bin/true"})
    for call in (lambda: schedd.query("ClusterId == (("), lambda: schedd.history("((("),
                 lambda: schedd.act("Hold", "ClusterId =="), lambda: schedd.edit("((", "A", "1")):
        with pytest.raises(AdError, match="^constraint: not a ClassAd expression"):
            call()


def test_history_is_newest_first_with_match_and_since(schedd: fetchwork.Schedd) -> None:
    clusters = [schedd.submit({"executable": "/bin/true"}, count=2).cluster() for _ in range(3)]
    for cluster in clusters:
        schedd.act(htcondor2.JobAction.Remove, cluster)
    newest = schedd.history(None, ["ClusterId", "ProcId", "JobStatus"])
    assert [ad["ClusterId"] for ad in newest] == [clusters[2]] * 2 + [clusters[1]] * 2 + \
        [clusters[0]] * 2
    assert all(ad["JobStatus"] == 3 and len(ad) == 3 for ad in newest)
    assert len(schedd.history(projection=["ProcId"], match=3)) == 3
    assert {ad["ClusterId"] for ad in schedd.history(f"ClusterId == {clusters[1]}",
                                                      ["ClusterId"])} == {clusters[1]}
    since_cluster = schedd.history(None, ["ClusterId"], since=clusters[1])
    assert [ad["ClusterId"] for ad in since_cluster] == [clusters[2]] * 2
    since_job = schedd.history(None, ["ClusterId", "ProcId"], since=f"{clusters[2]}.0")
    assert ids_of(since_job) == [f"{clusters[2]}.1"]
    since_expr = schedd.history(None, ["ClusterId"], since=f"ClusterId < {clusters[2]}",
                                match=5)
    assert len(since_expr) == 2


# -- act ------------------------------------------------------------------------------------

def test_act_counts_as_htcondor_does(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}, count=3).cluster()
    held = schedd.act(htcondor2.JobAction.Hold, [f"{cluster}.0", f"{cluster}.1", "999.0"],
                      reason="because")
    assert isinstance(held, classad2.ClassAd)
    assert (held["TotalSuccess"], held["TotalNotFound"], held["TotalJobAds"],
            held["TotalChangedAds"], held["TotalError"]) == (2, 1, 2, 2, 0)
    assert schedd.query(f"ClusterId == {cluster} && ProcId == 0",
                        ["HoldReason"])[0]["HoldReason"] == "because"
    again = schedd.act("hold", f"ClusterId == {cluster}")
    assert (again["TotalSuccess"], again["TotalAlreadyDone"]) == (1, 2)
    release = schedd.act("Release", classad2.ExprTree(f"ClusterId == {cluster} && ProcId < 2"))
    assert release["TotalSuccess"] == 2
    none = schedd.act("Release", f"{cluster}.0")
    assert (none["TotalSuccess"], none["TotalBadStatus"]) == (0, 1)
    gone = schedd.act(htcondor2.JobAction.Remove, str(cluster))
    assert gone["TotalSuccess"] == 3
    after = schedd.act(htcondor2.JobAction.Remove, f"{cluster}.0")
    assert (after["TotalSuccess"], after["TotalNotFound"]) == (0, 1)


def test_the_default_reason_is_htcondors(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}).cluster()
    schedd.act(htcondor2.JobAction.Hold, cluster)
    assert schedd.query(projection=["HoldReason"])[0]["HoldReason"] == "Python-initiated action"


def test_vacate_requeues_a_running_job(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}, count=2).cluster()
    claimed = schedd.broker.claim(SLOT)
    assert claimed is not None
    vacate = schedd.act(htcondor2.JobAction.Vacate, cluster)
    assert (vacate["TotalSuccess"], vacate["TotalBadStatus"]) == (1, 1)
    twice = schedd.act(htcondor2.JobAction.Vacate, f"{cluster}.{claimed['ProcId']}")
    assert twice["TotalAlreadyDone"] == 1
    removed = schedd.act(htcondor2.JobAction.Remove, cluster)
    assert removed["TotalSuccess"] == 2  # the running one is marked, as condor_rm shows X


@pytest.mark.parametrize("action", [htcondor2.JobAction.Suspend, htcondor2.JobAction.Continue,
                                    htcondor2.JobAction.RemoveX, htcondor2.JobAction.VacateFast,
                                    "Pause"])
def test_actions_fetchwork_does_not_do_are_refused(schedd: fetchwork.Schedd,
                                                   action: htcondor2.JobAction | str) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}).cluster()
    with pytest.raises(JobActionError):
        schedd.act(action, cluster)
    assert schedd.query(projection=["JobStatus"])[0]["JobStatus"] == 1


def test_bad_job_specs_are_refused(schedd: fetchwork.Schedd) -> None:
    with pytest.raises(JobIdError, match="'x.1' is not a job id"):
        schedd.act("Hold", ["1.0", "x.1"])
    with pytest.raises(JobIdError):
        schedd.act("Hold", [])
    with pytest.raises(JobIdError):
        schedd.edit("  ", "A", "1")


# -- edit ---------------------------------------------------------------------------------

def test_edit_sets_values_and_counts_jobs(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}, count=3).cluster()
    assert schedd.edit(f"{cluster}.1", "Tag", '"one"') == 1
    assert schedd.edit([f"{cluster}.0", f"{cluster}.2"], "Tag", classad2.ExprTree("2")) == 2
    assert schedd.edit(f"ClusterId == {cluster} && ProcId > 0", "Level", "7") == 2
    ads = schedd.query(projection=["ProcId", "Tag", "Level"])
    assert [dict(ad.items()) for ad in ads] == [
        {"ProcId": 0, "Tag": 2}, {"ProcId": 1, "Tag": "one", "Level": 7},
        {"ProcId": 2, "Tag": 2, "Level": 7}]
    assert schedd.edit("ClusterId == 12345", "Tag", "1") == 0
    with pytest.raises(NoMatchingJobsError, match="no matching jobs"):
        schedd.edit("12345.0", "Tag", "1")


def test_edit_refuses_what_condor_qedit_refuses(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}).cluster()
    for attr in ("Owner", "ClusterId", "ProcId", "JobStatus", "FetchworkState"):
        with pytest.raises(EditError, match=attr):
            schedd.edit(cluster, attr, "1")
    with pytest.raises(EditError, match="immutable"):
        schedd.edit("ClusterId == 12345", "Owner", '"x"')  # refused whatever it selects
    with pytest.raises(EditError, match="not a ClassAd expression"):
        schedd.edit(cluster, "Tag", "((")
    with pytest.raises(TypeError):
        schedd.edit(cluster, "Tag", 5)  # type: ignore[arg-type]


def test_a_new_priority_is_claimed_first(schedd: fetchwork.Schedd) -> None:
    cluster = schedd.submit({"executable": "/bin/true"}, count=3).cluster()
    assert schedd.edit(f"{cluster}.2", "JobPrio", "10") == 1
    claimed = schedd.broker.claim(SLOT)
    assert claimed is not None and claimed["ProcId"] == 2


@pytest.fixture
def private_schedd(tmp_path: Path, pool_name: str) -> Iterator[fetchwork.Schedd]:
    server = EmbeddedRedis(tmp_path / "own")
    server.start()
    yield fetchwork.Schedd(server.url, pool=pool_name)
    server.stop()


def test_a_refused_redis_command_is_a_broker_error(private_schedd: fetchwork.Schedd) -> None:
    client = private_schedd.broker.client
    cluster = private_schedd.submit({"executable": "/bin/true"}).cluster()
    client.execute_command("ACL", "SETUSER", "default", "-evalsha", "-eval")
    try:
        with pytest.raises(fetchwork.errors.BrokerError, match="refused the request: .*evalsha"):
            private_schedd.act("Hold", cluster)
        with pytest.raises(fetchwork.errors.SubmitError, match="refused: .*evalsha"):
            private_schedd.submit({"executable": "/bin/true"})
    finally:
        client.execute_command("ACL", "SETUSER", "default", "+@all")


def test_root_is_told_its_jobs_do_not_run_as_root(schedd: fetchwork.Schedd,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    schedd.submit({"executable": "/bin/true"})
    said = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    if os.geteuid() == 0:
        assert any("jobs never run as root" in text for text in said)
    else:
        assert not any("root" in text for text in said)


def test_with_no_broker_configured_the_embedded_redis_starts_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state"
    monkeypatch.delenv("FETCHWORK_BROKER", raising=False)
    monkeypatch.delenv("_FETCHWORK_FETCHWORK_BROKER", raising=False)
    monkeypatch.setenv("FETCHWORK_CONFIG", os.devnull)
    monkeypatch.setenv("FETCHWORK_STATE_DIR", str(state))
    try:
        first = fetchwork.Schedd()
        assert any("started a Redis server for the queue" in record.getMessage()
                   for record in caplog.records)
        caplog.clear()
        cluster = first.submit({"executable": "/bin/true"}).cluster()
        second = fetchwork.Schedd()
        assert not any("started" in record.getMessage() for record in caplog.records)
        assert [ad["ClusterId"] for ad in second.query(projection=["ClusterId"])] == [cluster]
    finally:
        EmbeddedRedis(state).stop()
