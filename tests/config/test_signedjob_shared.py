"""The signed text written once per cluster (signedjob.SharedTexts) is, byte for byte,
the text written per job (signed_text_of), whether or not a job has its own values
for the attributes its cluster shares."""

from __future__ import annotations

from typing import Any

from fetchwork.config import signedjob

SHARED: dict[str, Any] = {
    "ClusterId": 7, "Owner": "alice", "Cmd": "/home/alice/bin/run", "Arguments": "a b",
    "Environment": 'A="1" B=\\x', "Iwd": "/home/alice/é", "JobUniverse": 5,
    "GetEnv": True, "Requirements": {"$expr": "Memory >= 2048"}, "RequestMemory": 2048,
    "TransferInput": ["x.dat", "y.dat"], "QDate": 1795800000,
}
DERIVED = ("ProcId", "GlobalJobId", "FetchworkOrder")


def job(proc: int, own: dict[str, Any] | None = None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A job of the cluster as batchads.split_ads_of puts it together: the shared
    attributes it does not override, its derived ones, then its own."""
    mine = own or {}
    data = {name: value for name, value in SHARED.items() if name not in mine}
    data["ProcId"] = proc
    data["GlobalJobId"] = f"pool#7.{proc}#1795800000"
    data["FetchworkOrder"] = 1000 + proc
    data.update(mine)
    return data, (*DERIVED, *mine)


def test_jobs_without_own_values_give_the_per_job_text() -> None:
    texts = signedjob.SharedTexts()
    for proc in range(5):
        data, own = job(proc)
        assert texts.text(data, own) == signedjob.signed_text_of(data)
    assert texts.text(*job(3)) != texts.text(*job(4))


def test_jobs_with_their_own_values_for_shared_attributes_give_the_per_job_text() -> None:
    texts = signedjob.SharedTexts()
    owns: list[dict[str, Any]] = [
        {},
        {"Cmd": "/bin/other"},  # an own value for a shared signed attribute
        {"cmd": "/bin/lower"},  # another spelling: the later one counts
        {"Arguments": 'with "quotes" and \\'},
        {"Environment": {"$expr": "strcat(\"A=\", ProcId)"}},
        {"Owner": "bob", "Iwd": "/tmp", "Out": "out.3"},  # one the cluster lacks too
        {"RunAsOwner": False, "JobUniverse": 9},
        {"RequestMemory": 1},  # an own value the text does not sign
        {},
        {"Cmd": "/bin/other"},
    ]
    for proc, own in enumerate(owns):
        data, own_names = job(proc, own)
        assert texts.text(data, own_names) == signedjob.signed_text_of(data), own


def test_own_names_the_job_lacks_and_an_empty_own_set_change_nothing() -> None:
    data, _own = job(2)
    assert signedjob.SharedTexts().text(data, ("Nothing", "Out")) \
        == signedjob.signed_text_of(data)
    assert signedjob.SharedTexts().text(data, ()) == signedjob.signed_text_of(data)
    assert signedjob.SharedTexts().text(data, tuple(data)) == signedjob.signed_text_of(data)


def test_the_texts_check_as_the_starter_checks_them() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from fetchwork.config.ads import from_dict

    key = Ed25519PrivateKey.generate()
    texts = signedjob.SharedTexts()
    jobs = [job(proc, {"Arguments": "own"} if proc % 2 else None) for proc in range(4)]
    leaves = [signedjob.leaf_digest(texts.text(data, own)) for data, own in jobs]
    batch = signedjob.sign_batch_blob(key, "pool", "b1", leaves)
    for index, (data, _own) in enumerate(jobs):
        proof = signedjob.proof_text(batch.blob, index)
        ad = from_dict({**data, signedjob.SIGNATURE_ATTR: proof})
        assert signedjob.check(key.public_key(), ad, "pool") is None
