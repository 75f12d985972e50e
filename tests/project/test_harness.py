"""The test harness itself: ports reserved across test processes, folders kept
outside the checkout, and the tiers of the suite."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ports, tiers
from tests.support.scratch import ROOT, kept_folder
from tests.support.tiers import is_pool

# A second test process: it reserves ports as asked, prints them, and holds them
# until its stdin closes.
HOLDER = """
import sys
from tests.support.ports import reserve_port
among = [int(word) for word in sys.argv[2:]] or None
print(reserve_port(also=tuple(int(w) for w in sys.argv[1].split(",") if w), among=among),
      flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.communicate(timeout=30)


def hold(started: list[subprocess.Popen[str]], also: tuple[int, ...] = (),
         among: tuple[int, ...] = ()) -> int:
    """The port another process reserved and holds."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, ",".join(map(str, also)), *map(str, among)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    started.append(proc)
    assert proc.stdout is not None
    return int(proc.stdout.readline())


def test_the_ephemeral_range_is_read_from_the_kernels_text() -> None:
    assert ports.ephemeral_range("32768\t60999\n") == (32768, 60999)
    low, high = ports.ephemeral_range()
    assert 0 < low <= high <= 65535


def test_candidates_keep_a_port_and_its_companions_out_of_the_ephemeral_range() -> None:
    found = ports.candidates((10000,), (32768, 60999))
    assert found[0] == ports.LOWEST and found[-1] == 22767
    assert all(not 32768 <= port + offset <= 60999 for port in found for offset in (0, 10000))
    assert ports.candidates((), (32768, 60999))[-1] == ports.HIGHEST


def test_candidates_fall_back_to_every_port_when_all_are_ephemeral() -> None:
    assert ports.candidates((10000,), (1024, 65535)) == list(range(ports.LOWEST, 55536))


def test_a_reserved_port_is_free_held_and_not_handed_out_twice() -> None:
    first, second = ports.reserve_port(), ports.reserve_port()
    assert first != second
    assert {first, second} <= set(ports.held())
    low, high = ports.ephemeral_range()
    assert not low <= first <= high
    with pytest.raises(ports.NoFreePort):
        ports.reserve_port(among=[first])


def test_a_port_another_process_holds_is_skipped_until_it_exits(holder) -> None:
    theirs = hold(holder)
    assert theirs not in ports.held()
    with pytest.raises(ports.NoFreePort):
        ports.reserve_port(among=[theirs])
    holder[0].kill()
    holder[0].wait(30)
    assert ports.reserve_port(among=[theirs]) == theirs


def test_a_port_group_is_held_whole(holder) -> None:
    mine = ports.reserve_port(also=(10000,))
    assert {mine, mine + 10000} <= set(ports.held())
    theirs = hold(holder, also=(10000,))
    with pytest.raises(ports.NoFreePort):
        ports.reserve_port(among=[theirs + 10000])
    # A group one of whose ports another process holds is skipped; its other
    # port is not kept.
    with pytest.raises(ports.NoFreePort):
        ports.reserve_port(also=(10000,), among=[theirs - 10000])
    assert theirs - 10000 not in ports.held()


def test_kept_folders_are_outside_the_checkout_and_one_per_checkout(tmp_path: Path) -> None:
    folder = kept_folder("hypothesis")
    assert not folder.resolve().is_relative_to(ROOT)
    assert folder == kept_folder("hypothesis")
    assert kept_folder("other").parent == folder.parent != kept_folder("other", tmp_path).parent


def test_the_pool_tier_is_named_by_folder_or_module() -> None:
    assert is_pool("pool/test_pool.py")
    assert is_pool("startd/test_signals.py")
    assert not is_pool("startd/test_units.py")
    assert not is_pool("config/test_ads.py")
    assert not is_pool("broker/pool/test_x.py")


def test_every_module_named_for_the_pool_tier_exists() -> None:
    tests = ROOT / "tests"
    assert all((tests / folder).is_dir() for folder in tiers.POOL_FOLDERS)
    assert all((tests / module).is_file() for module in tiers.POOL_MODULES)


def test_the_collected_tests_carry_their_tier(request: pytest.FixtureRequest) -> None:
    tests = ROOT / "tests"
    for item in request.session.items:
        path = item.path.resolve().relative_to(tests).as_posix()
        assert (item.get_closest_marker("pool") is not None) == is_pool(path), item.nodeid
