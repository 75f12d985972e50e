"""The typed wrappers of the Lua scripts (store/calls.py): one per script, the only
callers of the scripts, keyword arguments only; and a few of the contracts they
hold, against a real Redis (finish.lua's exit the job policy may change, the
backfill reservation a claim's first read brings)."""

from __future__ import annotations

import inspect
import re
import time
from pathlib import Path
from typing import Any

import pytest

from fetchwork.broker.backfill.plan import Reservation, Resources, to_record
from fetchwork.broker.client import Broker
from fetchwork.broker.jobpolicy.onexit import POLICY, POLICY_ATTRS
from fetchwork.broker.store import calls, codec, scripts
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import JobStatus

pytestmark = pytest.mark.timeout(60)

BROKER = Path(calls.__file__).resolve().parents[1]
SLOT = parse_ad('Name = "slot1@calls"\nMemory = 1000\nSTART = true\n')
JOB = {"Cmd": "/bin/true"}
# How a script was called before the wrappers: by name, with a raw argument list.
RAW_CALL = re.compile(r"\.run\(\s*[\"']|scripts\.(call|queue)\(|ensure_loaded\(")


def test_every_script_has_one_wrapper_named_after_it() -> None:
    for name in scripts.TRANSITIONS + scripts.STANDALONE:
        wrapper = getattr(calls, name, None)
        assert callable(wrapper), name
        assert f"{name}.lua" in (wrapper.__doc__ or ""), name


def test_wrappers_take_keyword_arguments_only() -> None:
    for name in scripts.TRANSITIONS + scripts.STANDALONE:
        params = list(inspect.signature(getattr(calls, name)).parameters.values())
        assert params[0].name == "store", name
        leading = [param.name for param in params[1:]
                   if param.kind is not inspect.Parameter.KEYWORD_ONLY]
        assert leading in ([], ["pipe"]), (name, leading)


def test_no_module_but_the_store_calls_a_script_by_name() -> None:
    # The wrappers, the runner they share (Store.run) and the loader.
    owners = {BROKER / "store" / name for name in ("calls.py", "__init__.py", "scripts.py")}
    found = [f"{path.relative_to(BROKER)}:{number}"
             for path in sorted(BROKER.rglob("*.py")) if path not in owners
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if RAW_CALL.search(line)]
    assert found == []


def test_the_claim_scripts_share_their_checks_and_the_lapsed_reservation_rule() -> None:
    claims = scripts._read("claims")
    rule = scripts._read("reservation")
    assert claims in scripts.source("claim") and claims in scripts.source("claim_quiet")
    assert rule in scripts.source("claim_quiet") and rule in scripts.source("read_backfill")
    for name in scripts.TRANSITIONS + scripts.STANDALONE:
        own = scripts._read(name)
        assert "local function reservation_in_force" not in own, name
        assert "local function allowed" not in own, name


@pytest.fixture
def broker(redis_client: Any, pool_name: str) -> Broker:
    config = Config.load(environ={}).with_values(JOB_DEFAULT_LEASE_DURATION=600)
    return Broker(redis_client, pool_name, config)


def claimed(broker: Broker, ad: dict[str, Any]) -> tuple[str, str]:
    (job,) = broker.submit([ad])
    claim = broker.claim(SLOT)
    assert claim is not None
    return job, claim["FetchworkClaim"]


def test_an_exit_naming_the_policy_attributes_is_refused_when_the_job_has_one(
        broker: Broker) -> None:
    job, token = claimed(broker, {**JOB, "OnExitHold": True})
    assert calls.finish(broker.store, job_id=job, token=token, how="exit",
                        policy_attrs=POLICY_ATTRS) == POLICY
    assert broker.get(job)["JobStatus"] == JobStatus.RUNNING
    assert calls.finish(broker.store, job_id=job, token=token, how="exit") == "COMPLETED"


def test_an_exit_policy_at_its_defaults_finishes_in_the_same_call(broker: Broker) -> None:
    job, token = claimed(broker, {**JOB, "OnExitRemove": True, "OnExitHold": False})
    fields = codec.fields_of({"ExitCode": 0})
    assert calls.finish(broker.store, job_id=job, token=token, how="exit", fields=fields,
                        policy_attrs=POLICY_ATTRS) == "COMPLETED"
    assert broker.get(job)["ExitCode"] == 0


def test_the_policy_attributes_change_only_an_exit(broker: Broker) -> None:
    job, token = claimed(broker, {**JOB, "OnExitHold": True})
    assert calls.finish(broker.store, job_id=job, token=token, how="hold", reason="stop",
                        hold_code=21, hold_subcode=4, policy_attrs=POLICY_ATTRS) == "HELD"
    ad = broker.get(job)
    assert ad["HoldReasonCode"] == 21 and ad["HoldReasonSubCode"] == 4


def test_a_finish_of_another_claim_is_none(broker: Broker) -> None:
    job, _token = claimed(broker, JOB)
    assert calls.finish(broker.store, job_id=job, token="other", how="exit",
                        policy_attrs=POLICY_ATTRS) is None


def first_read_backfill(broker: Broker) -> Any:
    pipe = broker.store.client.pipeline(transaction=False)
    calls.read_backfill(broker.store, pipe)
    (reply,) = pipe.execute()
    return reply


def reserve(broker: Broker, job_id: str) -> bytes:
    order = broker.store.client.zscore(broker.keys.idle, job_id)
    now = time.time()
    one = Resources(1, 1, 1)
    record = codec.pack(to_record(Reservation(job_id, order, "elsewhere", now + 3600, one, one,
                                              one, now)))
    broker.store.client.set(broker.keys.backfill, record)
    return record


def test_the_first_read_brings_a_reservation_only_while_its_job_is_idle(
        broker: Broker) -> None:
    assert first_read_backfill(broker) is None
    jobs = broker.submit([JOB] * 2)
    record = reserve(broker, jobs[1])
    assert first_read_backfill(broker) == record
    broker.remove([jobs[1]])
    assert first_read_backfill(broker) is None, "a lapsed reservation holds nothing back"


def test_the_first_read_leaves_an_unreadable_reservation_to_the_decoder(
        broker: Broker) -> None:
    broker.store.client.set(broker.keys.backfill, b"not msgpack")
    assert first_read_backfill(broker) == b"not msgpack"
