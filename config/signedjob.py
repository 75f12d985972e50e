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
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

import classad2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fetchwork.config.ads import attr_text, from_dict

# The job ad attribute that carries the signature.
SIGNATURE_ATTR = "FetchworkSignature"
VERSION = "v1"
_HEADER = b"fetchwork job signature v1\n"

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


_WANTED = frozenset(name.lower() for name in SIGNED_ATTRIBUTES)
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
    as `attr_text` writes them, without building an ad (the leader signs every job);
    anything else goes through a one-attribute ad."""
    by_name = {name.lower(): (name, value) for name, value in data.items()
               if name.lower() in _WANTED}
    lines = []
    for name in SIGNED_ATTRIBUTES:
        found = by_name.get(name.lower())
        if found is None:
            lines.append(f"{name}!")
            continue
        value = found[1]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, str) and _PLAIN_STRING_RE.match(value):
            text = f'"{value}"'
        else:
            text = attr_text(from_dict({found[0]: value}), found[0])
        lines.append(f"{name}={text}")
    return _HEADER + "\n".join(lines).encode("utf-8")


def sign(key: Ed25519PrivateKey, text: bytes) -> str:
    """The `FetchworkSignature` value for `text`."""
    return f"{VERSION}:{base64.b64encode(key.sign(text)).decode('ascii')}"


def check(key: Ed25519PublicKey, ad: classad2.ClassAd) -> str | None:
    """Why `ad`'s signature does not check with `key`, or None when it does."""
    value = ad.get(SIGNATURE_ATTR) if SIGNATURE_ATTR in ad else None
    if not isinstance(value, str) or not value:
        return f"the job ad has no {SIGNATURE_ATTR}: it was not admitted by the pool's broker"
    version, _, encoded = value.partition(":")
    if version != VERSION:
        return f"{SIGNATURE_ATTR} has version {version!r}; this machine checks {VERSION}"
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
