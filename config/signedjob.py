"""What a job's signature covers, and how a signature is made and checked.

The broker service signs, with the pool's Ed25519 key, the attributes that
decide what a job runs and as whom (`SIGNED_ATTRIBUTES`); an execute
machine checks the signature with the pool's public key before it runs a job
as its owner. The signed text is built from the ClassAd text of each
attribute (`attr_text`, the form the fetch hook prints and the starter parses
back), one `Name=value` line per attribute in the order of
`SIGNED_ATTRIBUTES`, `Name!` for an attribute the ad lacks, so both sides
build the same bytes whatever carried the ad between them, and an attribute
added later (an `Env` next to `Environment`) breaks the signature too.

The signature travels in the job ad as `FetchworkSignature`
(`v1:<base64>`). A signature is bound to the job's identity in the pool
(`GlobalJobId` names the pool, the job and its submission time), so it
cannot be moved to another job. Both ends of the check (the broker's signer,
the starter's check) use this module and nothing else to build the text.

The broker signs once per admitted batch (`v2`), not once per job: each
job's leaf is the SHA-256 of its signed text; a hash tree (Merkle) over the
batch's leaves gives one root, and one Ed25519 signature covers the root
together with the pool's name, the batch's id and its number of jobs
(`batch_text`). Each job carries its batch id, its leaf index and its proof
path (the sibling hashes from its leaf to the root):

    FetchworkSignature = "v2:<batch id>:<jobs in batch>:<index>:<root signature>:<proof>"

(signature and proof in base64). The checker recomputes the root from the
job's own text and its proof, then checks the root's signature, which a
`RootCache` remembers once verified, so an execute machine pays one Ed25519
verification per batch. Leaves and inner nodes are hashed with different
prefixes, so a proof cannot pass an inner node off as a job. Any change to a
signed attribute changes the leaf and so the root; a proof taken from
another batch or another pool gives a root (or a signed pool name) that its
signature does not cover. `v1` (one signature per job, from before batches)
is still checked, so jobs queued before an upgrade keep running.

What a batch shares is stored once in the pool, not in every job: the
leader writes one string per batch (`batch_blob`: the root signature, the
batch id and size, then every level of the tree, leaves first, 32 bytes a
node), and each job's hash holds only which batch and which leaf it is. The
claim that hands a job to an execute machine reads the job's sibling nodes
from that string (lua/sigbatch.lua) and hands them out raw with the root's
signature; its caller writes them in base64 (config/signaturetext.py), which gives the
job its whole FetchworkSignature (`v3` below, `v2` for a batch stored before),
the text `proof_text` makes from the same bytes, so the check above is the
same for a job signed either way.

A stored batch's tree is `v3` (`WIDE_ARITY` = 16 children a node, not 2): the
leaves are 32 bytes a job whatever the tree, and a binary tree's inner nodes
add as many again, where a 16-wide tree's add a fifteenth of that (about 34
bytes a job in all against 64). A job's proof holds, at each level, the other
nodes of its group of 16 (read by the claim with one GETRANGE a level):

    FetchworkSignature = "v3:<batch id>:<jobs in batch>:<index>:<root signature>:<proof>"

and its batch's root is signed under its own header (`batch_text`), so a `v2`
proof cannot be passed off as a `v3` one or the reverse. `v2` and `v1` jobs
stay checkable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import classad2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fetchwork.config.ads import attr_text, from_dict
from fetchwork.config.signaturetext import SIGNATURE_ATTR, SIGNATURE_BYTES, signature_text

VERSION = "v2"
_V1 = "v1"
# The stored batches' version: a hash tree of WIDE_ARITY children a node.
WIDE_VERSION, WIDE_ARITY = "v3", 16
_HEADER = b"fetchwork job signature v1\n"
_BATCH_HEADER = b"fetchwork job batch v2\n"
_WIDE_BATCH_HEADER = b"fetchwork job batch v3 arity 16\n"
# The arity of each batch version's tree, and the header its root's signature covers.
_ARITY = {VERSION: 2, WIDE_VERSION: WIDE_ARITY}
_BATCH_HEADERS = {VERSION: _BATCH_HEADER, WIDE_VERSION: _WIDE_BATCH_HEADER}
# Hash prefixes of a leaf (one job's signed text) and of an inner node of the tree.
_LEAF, _NODE = b"\x00", b"\x01"
DIGEST_BYTES = 32
# A batch id: what the signer makes (batch_id) and nothing that could split the value.
_BATCH_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")

# Everything that decides what runs, where it reads and writes, and as whom:
# one attribute per line, so another (a transfer manifest's digest) is added
# by a line. Names are matched without regard to case, as ClassAds do.
SIGNED_ATTRIBUTES = (
    # the job's identity in the pool: pool, cluster.proc and submission time
    "GlobalJobId",
    "ClusterId",
    "ProcId",
    # who it runs as
    "Owner",
    # what runs
    "Cmd",
    "Arguments",
    "Args",
    "Environment",
    "Env",
    "GetEnv",
    "Iwd",
    "In",
    "Out",
    "Err",
    # the universe-like switches (not HookKeyword: the startd sets it to the keyword
    # whose fetch hook brought the job, as HTCondor's does)
    "JobUniverse",
    "WantDocker",
    "DockerImage",
    "ContainerImage",
    "RunAsOwner",
    # input files and their digests (when the ad names them)
    "TransferInput",
    "TransferExecutable",
    "TransferInputDigests",
    # the input sandbox the pool holds for the job: named by the digest of its files'
    # digests, so it pins the executable and every input sent with the job
    "FetchworkInputManifest",
)


# A string literal written as it is (config/ads.py writes these the same way).
_PLAIN_STRING_RE = re.compile(r'[ !#-\[\]-~]*\Z')


def signed_text(ad: classad2.ClassAd) -> bytes:
    """The bytes a signature covers for job ad `ad`."""
    lines = []
    for name in SIGNED_ATTRIBUTES:
        if name in ad:
            lines.append(f"{name}={attr_text(ad, name)}")
        else:
            lines.append(f"{name}!")
    return _HEADER + "\n".join(lines).encode("utf-8")


def signed_text_of(data: Mapping[str, Any]) -> bytes:
    """`signed_text` of a stored job (a to_dict-style mapping). Literals are written
    as `attr_text` writes them, without building an ad (the leader signs every job,
    and a submission computes every job's staged digest); anything else goes through
    a one-attribute ad."""
    names = tuple(data)
    plan = _PLANS.get(names)
    if plan is None:
        plan = _plan(names)
    heads, tail = plan
    parts = []
    for head, name in heads:
        value = data[name]
        kind = type(value)
        parts.append(head)
        # A plain string literal: printable ASCII without '"' or '\\' (_PLAIN_STRING_RE),
        # tested with str's own methods, the common case first.
        if kind is str and value.isascii() and value.isprintable() and '"' not in value \
                and "\\" not in value:
            parts.append(f'"{value}"')
        elif kind is int:
            parts.append(str(value))
        else:
            parts.append(_value_text(name, value))
    parts.append(tail)
    return _HEADER + "".join(parts).encode("utf-8")


def _text_of(name: str, value: Any) -> str:
    """`_value_text`, the common literals first (as `signed_text_of` writes them)."""
    kind = type(value)
    if kind is str and value.isascii() and value.isprintable() and '"' not in value \
            and "\\" not in value:
        return f'"{value}"'
    if kind is int:
        return str(value)
    return _value_text(name, value)


class SharedTexts:
    """`signed_text_of` for many jobs that share most of their attributes (the jobs of
    one cluster, read together): the text of the shared attributes is written once
    for each set of names, and each job adds only the lines of its own values.

    `text(data, own)` gives exactly `signed_text_of(data)` when every attribute of
    `data` not named in `own` has the same value for every job given to this object
    (the cluster's shared ad); `own` names the job's own values (its hash's, those
    derived from its id). Names in `own` the job lacks change nothing."""

    def __init__(self) -> None:
        # By (the job's names, its own names): the constant texts between the own
        # values, and the own values' names, in the order of the text.
        self._forms: dict[tuple[tuple[str, ...], tuple[str, ...]],
                          tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def text(self, data: Mapping[str, Any], own: tuple[str, ...],
             names: tuple[str, ...] | None = None) -> bytes:
        """The signed text of `data` (`names`: tuple(data), when the caller has it)."""
        if names is None:
            names = tuple(data)
        form = self._forms.get((names, own))
        if form is None:
            form = self._forms[(names, own)] = self._form(data, names, own)
        constants, slots = form
        if not slots:
            return constants[0].encode("utf-8")
        parts = [constants[0]]
        for name, after in zip(slots, constants[1:], strict=True):
            parts.append(_text_of(name, data[name]))
            parts.append(after)
        return "".join(parts).encode("utf-8")

    @staticmethod
    def _form(data: Mapping[str, Any], names: tuple[str, ...], own: tuple[str, ...]
              ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        plan = _PLANS.get(names) or _plan(names)
        heads, tail = plan
        mine = set(own)
        constants: list[str] = []
        slots: list[str] = []
        pending = [_HEADER.decode("ascii")]
        for head, name in heads:
            pending.append(head)
            if name in mine:
                constants.append("".join(pending))
                slots.append(name)
                pending = []
            else:
                pending.append(_text_of(name, data[name]))
        pending.append(tail)
        constants.append("".join(pending))
        return tuple(constants), tuple(slots)


def _value_text(name: str, value: Any) -> str:
    """The ClassAd text of stored attribute `name`'s `value`, as `attr_text` writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _PLAIN_STRING_RE.match(value):
        return f'"{value}"'
    return attr_text(from_dict({name: value}), name)


_POSITION = {name.lower(): index for index, name in enumerate(SIGNED_ATTRIBUTES)}
# A signed text's plan for one set of names: (head, name) for each signed attribute the
# job has, in the order of SIGNED_ATTRIBUTES, where the head is the text before its
# value (the `Name!` lines of the absent attributes before it, and its `Name=`), and
# the text after the last value. Of two spellings of one attribute, the later counts.
_Plan = tuple[tuple[tuple[str, str], ...], str]
# Plans by the names a stored job has (jobs of one submission share theirs). Bounded:
# names come from users.
_PLANS: dict[tuple[str, ...], _Plan] = {}
_PLANS_KEPT = 1024


def _plan(names: tuple[str, ...]) -> _Plan:
    found: list[str | None] = [None] * len(SIGNED_ATTRIBUTES)
    for name in names:
        index = _POSITION.get(name.lower())
        if index is not None:
            found[index] = name
    heads: list[tuple[str, str]] = []
    pending: list[str] = []
    for position, (attr, spelled) in enumerate(zip(SIGNED_ATTRIBUTES, found, strict=True)):
        if position:
            pending.append("\n")
        if spelled is None:
            pending.append(f"{attr}!")
        else:
            pending.append(f"{attr}=")
            heads.append(("".join(pending), spelled))
            pending = []
    plan = (tuple(heads), "".join(pending))
    if len(_PLANS) < _PLANS_KEPT:
        _PLANS[names] = plan
    return plan


def check(key: Ed25519PublicKey, ad: classad2.ClassAd, pool: str,
          roots: RootCache | None = None) -> str | None:
    """Why `ad`'s signature does not check with `key` for pool `pool`, or None when it
    does. A batch root verified before (in `roots`) is not verified again."""
    value = ad.get(SIGNATURE_ATTR) if SIGNATURE_ATTR in ad else None
    if not isinstance(value, str) or not value:
        return f"the job ad has no {SIGNATURE_ATTR}: it was not admitted by the pool's broker"
    version, _, rest = value.partition(":")
    if version == _V1:
        return _check_v1(key, ad, rest)
    if version not in _ARITY:
        return (f"{SIGNATURE_ATTR} has version {version!r}; this machine checks "
                f"{WIDE_VERSION}, {VERSION} and {_V1}")
    try:
        proof = BatchProof.parse(rest, version)
    except ValueError as exc:
        return f"{SIGNATURE_ATTR} is malformed: {exc}"
    root = proof.root(leaf_digest(signed_text(ad)))
    if root is None:
        return f"{SIGNATURE_ATTR}'s proof path does not fit its leaf index and batch size"
    message = batch_text(pool, proof.batch_id, proof.count, root, version)
    if roots is not None and roots.known(key, message, proof.signature):
        return None
    try:
        key.verify(proof.signature, message)
    except InvalidSignature:
        return ("the signed attributes (" + ", ".join(SIGNED_ATTRIBUTES) + ") were changed "
                f"after the broker signed them, or the proof is from another batch, another "
                f"pool than {pool!r} or another pool's key")
    if roots is not None:
        roots.add(key, message, proof.signature)
    return None


def _check_v1(key: Ed25519PublicKey, ad: classad2.ClassAd, encoded: str) -> str | None:
    """The check of a job signed alone (before batch signatures)."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError:
        return f"{SIGNATURE_ATTR} is not base64"
    try:
        key.verify(raw, signed_text(ad))
    except InvalidSignature:
        return ("the signed attributes (" + ", ".join(SIGNED_ATTRIBUTES) + ") were changed "
                "after the broker signed them, or another pool's key signed them")
    return None


# -- batch signatures ----------------------------------------------------------


def leaf_digest(text: bytes) -> bytes:
    """The tree leaf of one job: SHA-256 of its signed text (`signed_text`)."""
    return hashlib.sha256(_LEAF + text).digest()


def staged_digest(data: Mapping[str, Any]) -> bytes:
    """What a submission records of a stored job for its admission (a to_dict-style
    mapping): the leaf its signed attributes give, as the leader computes it."""
    return leaf_digest(signed_text_of(data))


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(_NODE + left + right).digest()


def tree(leaves: Sequence[bytes]) -> tuple[bytes, list[bytes]]:
    """The root of the hash tree over `leaves` (at least one), and each leaf's proof
    path: the sibling hashes from the leaf up, concatenated. A node without a sibling
    (the last of an odd level) goes up unchanged and adds nothing to the path."""
    if not leaves:
        raise ValueError("a batch signature needs at least one job")
    proofs: list[list[bytes]] = [[] for _ in leaves]
    level = list(leaves)
    # The leaves under each node of the current level, so a node's sibling is added to
    # the path of every leaf under it.
    under: list[list[int]] = [[index] for index in range(len(leaves))]
    while len(level) > 1:
        up, up_under = [], []
        for pos in range(0, len(level) - 1, 2):
            left, right = level[pos], level[pos + 1]
            for leaf in under[pos]:
                proofs[leaf].append(right)
            for leaf in under[pos + 1]:
                proofs[leaf].append(left)
            up.append(_node(left, right))
            up_under.append(under[pos] + under[pos + 1])
        if len(level) % 2:
            up.append(level[-1])
            up_under.append(under[-1])
        level, under = up, up_under
    return level[0], [b"".join(path) for path in proofs]


def root_of(leaf: bytes, index: int, count: int, path: bytes, arity: int = 2
            ) -> bytes | None:
    """The root that `leaf` at `index` of a `count`-leaf tree of `arity` children a node
    reaches with proof `path`; None when the path does not fit (too short, too long, an
    index outside the tree). At each level the path holds the other nodes of the leaf's
    group of `arity` in their order; a group of one node goes up unchanged (so arity 2
    is the binary tree of `tree`)."""
    if count < 1 or not 0 <= index < count or len(path) % DIGEST_BYTES:
        return None
    node, pos, size, used = leaf, index, count, 0
    while size > 1:
        start = pos - pos % arity
        width = min(arity, size - start)
        if width > 1:
            take = (width - 1) * DIGEST_BYTES
            if used + take > len(path):
                return None
            others = path[used:used + take]
            used += take
            cut = (pos - start) * DIGEST_BYTES
            node = hashlib.sha256(_NODE + others[:cut] + node + others[cut:]).digest()
        pos, size = pos // arity, (size + arity - 1) // arity
    return node if used == len(path) else None


def batch_text(pool: str, batch_id: str, count: int, root: bytes,
               version: str = VERSION) -> bytes:
    """The bytes a batch signature covers: the tree's version, the pool, the batch, its
    size and its root."""
    return _BATCH_HEADERS[version] + (f"pool={pool}\nbatch={batch_id}\ncount={count}\n"
                                      f"root={root.hex()}").encode()


def sign_batch(key: Ed25519PrivateKey, pool: str, batch_id: str,
               texts: Sequence[bytes]) -> list[str]:
    """The `FetchworkSignature` of each job of a batch, from their signed texts: one
    Ed25519 signature over the batch's root, and each job's own proof path."""
    return sign_leaves(key, pool, batch_id, [leaf_digest(text) for text in texts])


def sign_leaves(key: Ed25519PrivateKey, pool: str, batch_id: str,
                leaves: Sequence[bytes]) -> list[str]:
    """`sign_batch` from the jobs' leaves (`leaf_digest` of their signed texts), for a
    signer that has them already (admission compares each with the staged digest)."""
    if not _BATCH_ID_RE.match(batch_id):
        raise ValueError(f"batch id {batch_id!r} is not [A-Za-z0-9_.-], 1 to 64 characters")
    root, paths = tree(leaves)
    count = len(leaves)
    signature = base64.b64encode(key.sign(batch_text(pool, batch_id, count, root))).decode()
    head = f"{VERSION}:{batch_id}:{count}:"
    return [f"{head}{index}:{signature}:{base64.b64encode(path).decode()}"
            for index, path in enumerate(paths)]


# The batch string: the root's Ed25519 signature (SIGNATURE_BYTES), then "<batch
# id>:<count>" padded with spaces to BLOB_HEADER_BYTES, then each level of the tree
# from the leaves up.
BLOB_HEADER_BYTES = 160


@dataclass(frozen=True)
class SignedBatch:
    """A batch signed for the pool to store once (`blob`); its jobs are its leaves, in
    order, so a job's index is its place in the batch."""

    batch_id: str
    count: int
    blob: bytes


def levels(leaves: Sequence[bytes], arity: int = 2) -> list[list[bytes]]:
    """Every level of the hash tree of `arity` children a node over `leaves` (at least
    one), the leaves first and the root last; a level's last group of one node goes
    up unchanged (as `tree` for arity 2)."""
    if not leaves:
        raise ValueError("a batch signature needs at least one job")
    level = list(leaves)
    out = [level]
    while len(level) > 1:
        up = []
        for start in range(0, len(level), arity):
            group = level[start:start + arity]
            up.append(group[0] if len(group) == 1
                      else hashlib.sha256(_NODE + b"".join(group)).digest())
        level = up
        out.append(level)
    return out


def sign_batch_blob(key: Ed25519PrivateKey, pool: str, batch_id: str,
                    leaves: Sequence[bytes], version: str = WIDE_VERSION) -> SignedBatch:
    """The batch of `leaves` signed once, as the string the pool stores for it: the
    root's signature, the batch id and size (and, from v3 on, the tree's arity as
    "<batch id>:<count>:<arity>"), every level's nodes. `version` is v3 (16 wide); v2
    (binary) is kept for the tests of batches stored before v3."""
    if not _BATCH_ID_RE.match(batch_id):
        raise ValueError(f"batch id {batch_id!r} is not [A-Za-z0-9_.-], 1 to 64 characters")
    arity = _ARITY[version]
    tiers = levels(leaves, arity)
    count = len(leaves)
    signature = key.sign(batch_text(pool, batch_id, count, tiers[-1][0], version))
    label = f"{batch_id}:{count}" if version == VERSION else f"{batch_id}:{count}:{arity}"
    head = label.encode().ljust(BLOB_HEADER_BYTES - SIGNATURE_BYTES)
    return SignedBatch(batch_id, count, b"".join(
        [signature, head, *(node for tier in tiers[:-1] for node in tier)]))


def proof_text(blob: bytes, index: int) -> str | None:
    """The FetchworkSignature of leaf `index` of a stored batch string (`v3`, or `v2`
    for a binary batch stored before), as the claim rebuilds it (lua/sigbatch.lua);
    None when the string or the index does not fit."""
    head = blob[SIGNATURE_BYTES:BLOB_HEADER_BYTES].decode("ascii", "replace").strip()
    parts = head.split(":")
    version, arity = VERSION, 2
    if len(parts) == 3 and parts[2] == str(WIDE_ARITY):
        version, arity = WIDE_VERSION, WIDE_ARITY
        parts = parts[:2]
    if len(parts) != 2:
        return None
    batch_id, count_text = parts
    if not count_text.isdigit() or not 0 <= index < int(count_text):
        return None
    count = int(count_text)
    path, pos, size, offset = [], index, count, BLOB_HEADER_BYTES
    while size > 1:
        start = pos - pos % arity
        width = min(arity, size - start)
        if width > 1:
            group = blob[offset + start * DIGEST_BYTES:offset + (start + width) * DIGEST_BYTES]
            if len(group) != width * DIGEST_BYTES:
                return None
            cut = (pos - start) * DIGEST_BYTES
            path.append(group[:cut] + group[cut + DIGEST_BYTES:])
        offset += size * DIGEST_BYTES
        pos, size = pos // arity, (size + arity - 1) // arity
    return signature_text(f"{version}:{batch_id}:{count}:{index}:", blob[:SIGNATURE_BYTES],
                          b"".join(path))


@dataclass(frozen=True)
class BatchProof:
    """A `v2` or `v3` FetchworkSignature, read (everything after the version)."""

    batch_id: str
    count: int
    index: int
    signature: bytes
    path: bytes
    arity: int = 2

    @classmethod
    def parse(cls, rest: str, version: str = VERSION) -> BatchProof:
        parts = rest.split(":")
        if len(parts) != 5:
            raise ValueError("expected batch:count:index:signature:proof")
        batch_id, count, index, signature, path = parts
        if not _BATCH_ID_RE.match(batch_id):
            raise ValueError(f"batch id {batch_id[:64]!r} is not a batch id")
        if not (count.isdigit() and index.isdigit()) or len(count) > 9 or len(index) > 9:
            raise ValueError("the batch size and leaf index must be numbers")
        try:
            raw_signature = base64.b64decode(signature, validate=True)
            raw_path = base64.b64decode(path, validate=True)
        except (ValueError, binascii.Error) as exc:
            raise ValueError("its signature or proof is not base64") from exc
        return cls(batch_id, int(count), int(index), raw_signature, raw_path, _ARITY[version])

    def root(self, leaf: bytes) -> bytes | None:
        return root_of(leaf, self.index, self.count, self.path, self.arity)


class RootCache:
    """Batch roots whose signature this process verified, so each batch costs one
    Ed25519 verification; at most `size` kept, the least recently used dropped."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._seen: OrderedDict[tuple[bytes, bytes, bytes], None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _entry(key: Ed25519PublicKey, message: bytes, signature: bytes
               ) -> tuple[bytes, bytes, bytes]:
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return raw, message, signature

    def known(self, key: Ed25519PublicKey, message: bytes, signature: bytes) -> bool:
        entry = self._entry(key, message, signature)
        with self._lock:
            if entry in self._seen:
                self._seen.move_to_end(entry)
                return True
        return False

    def add(self, key: Ed25519PublicKey, message: bytes, signature: bytes) -> None:
        entry = self._entry(key, message, signature)
        with self._lock:
            self._seen[entry] = None
            self._seen.move_to_end(entry)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)


def public_pem(key: Ed25519PrivateKey) -> str:
    """The PEM text of `key`'s public half."""
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def read_public_key(pem: bytes, source: str) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM text; ValueError naming `source` otherwise."""
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise ValueError(f"{source} is not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{source} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


def read_private_key(pem: bytes, source: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from unencrypted PEM text; ValueError naming `source`."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{source} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{source} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def new_private_pem() -> tuple[bytes, bytes]:
    """A fresh Ed25519 key pair: (private PEM, public PEM)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return private, public_pem(key).encode()
