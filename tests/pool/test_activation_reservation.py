"""An activation answer 2 in a real 2-slot pool (`fetchwork up`): the job keeps the
slot it first reserved while later jobs run on the other one, round after round.

Each round submits a job A that the site's activation filter answers 2 and, after
it, four short jobs B..E; the filter writes down on which slot it saw A. Which slot
asks for A first varies from round to round with the pool's own timing. The
interleaving that moved the reservation (a backfill pass while A was being
evaluated) comes only now and then here; tests/broker/claim/test_reservation.py
forces it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pools import UpPool, fw, history_json, pool_up, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

ROUNDS = 4

GATE = """#!/bin/sh
# the ad file is the last argument
for last; do :; done
tag=$(sed -n 's/^Tag = //p' "$last")
slot=$(sed -n 's/^Name = //p' "$FETCHWORK_SLOT_AD")
echo "$tag $slot" >> {log}
[ "$tag" = '"A"' ] && exit 2
exit 0
"""


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[UpPool, Path]]:
    root = Path(tempfile.mkdtemp(prefix="fw-reservepool-"))
    root.chmod(0o777)
    log = root / "evaluations"
    gate = root / "gate"
    gate.write_text(GATE.format(log=log))
    gate.chmod(0o755)
    try:
        with pool_up(root, 2, ACTIVATION_FILTER_NAMES="GATE", ACTIVATION_FILTER_GATE=str(gate),
                     ACTIVATION_FILTER_INTERVAL="0.5", ACTIVATION_FILTER_TIMEOUT="10") as pool:
            yield pool, log
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cluster_of(submitted: str) -> int:
    return int(submitted.split("cluster ")[1].split(".")[0])


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_later_jobs_run_beside_the_reserved_slot_never_on_it(site, round_):
    pool, log = site
    work = pool.folder(f"round{round_}")
    (work / "a.sub").write_text('executable = /bin/true\n+Tag = "A"\nqueue\n')
    (work / "later.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'sleep 1'\"\n+Tag = \"B\"\nqueue 4\n")
    log.write_text("")
    a = cluster_of(fw(pool.env, "submit", "a.sub", cwd=work).stdout)
    later = cluster_of(fw(pool.env, "submit", "later.sub", cwd=work).stdout)

    def finished() -> list[dict]:
        done = [ad for ad in history_json(pool.env) if ad["ClusterId"] == later]
        return done if len(done) == 4 else []

    done = wait_until(finished, 120, fail_if=pool.up.died, what="the four later jobs")
    evaluated = [line.split()[1].strip('"') for line in log.read_text().splitlines()
                 if line.startswith('"A"')]
    [waiting] = [ad for ad in q_json(pool.env) if ad["ClusterId"] == a]
    fw(pool.env, "rm", str(a))
    reserved = waiting.get("FetchworkReservedSlot")
    assert reserved and set(evaluated) == {reserved}, (
        f"A's reservation moved: evaluated on {evaluated}, now reserved on {reserved}")
    hosts = [ad.get("LastRemoteHost") or ad.get("RemoteHost") for ad in done]
    assert reserved not in hosts, f"later jobs ran on {hosts}, {reserved} was A's"
    assert len(set(hosts)) == 1
