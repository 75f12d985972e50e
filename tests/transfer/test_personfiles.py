"""The leader reads of a person's packed manifest only its chunk digests, with its own
small reader (the broker does not import transfer/): it must read what
transfer/manifest.py packs, and refuse what is not a manifest."""

from __future__ import annotations

import msgpack
import pytest

from fetchwork.broker.trust import personfiles
from fetchwork.transfer import delivery, inputs
from fetchwork.transfer.manifest import FileEntry, Manifest, UrlEntry

A, B, C = ("a" * 64, "b" * 64, "c" * 64)


def test_the_leader_reads_the_digests_the_manifest_packs() -> None:
    manifest = Manifest((FileEntry("x", 0o644, 10, A, (A, B)),
                         FileEntry("d/y", 0o600, 5, C, (C, A))),
                        ("d",), (UrlEntry("https://h/z", "z"),))
    assert personfiles.manifest_digests(manifest.pack()) == manifest.digests() == [A, B, C]


def test_the_attribute_names_agree() -> None:
    assert personfiles.INPUT_MANIFEST_ATTR == inputs.INPUT_MANIFEST_ATTR
    assert personfiles.OUTPUT_MANIFEST_ATTR == delivery.OUTPUT_MANIFEST_ATTR


@pytest.mark.parametrize("packed", [
    b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"v": 2, "files": []}),
    msgpack.packb({"v": 1, "files": [["x", 1, 2, A]]}),
    msgpack.packb({"v": 1, "files": [["x", 1, 2, A, ["../etc"]]]}),
    msgpack.packb({"v": 1, "files": [["x", 1, 2, A, [A.upper()]]]}),
])
def test_what_is_not_a_manifest_is_refused(packed: bytes) -> None:
    with pytest.raises(ValueError):
        personfiles.manifest_digests(packed)
