"""A batch-signed job's FetchworkSignature, written from its raw parts.

The claim that hands a signed job to an execute machine reads the job's
label, its batch's root signature and its proof out of the batch's stored
string, and hands them out raw (broker/store/lua/sigbatch.lua); its caller
writes them here as the text the job's ad carries. This module loads no
cryptography, so a startd whose claims write signatures does not carry it
(config/signedjob.py, which checks them, does).
"""

from __future__ import annotations

import base64

# The job ad attribute that carries the signature.
SIGNATURE_ATTR = "FetchworkSignature"
# An Ed25519 signature: the root's, first in a batch's string and in a claim's parts.
SIGNATURE_BYTES = 64


def signature_text(label: str, signature: bytes, path: bytes) -> str:
    """"<label><signature>:<proof>", the two binary parts in base64; `label` is
    "<version>:<batch id>:<jobs in batch>:<index>:"."""
    return f"{label}{base64.b64encode(signature).decode()}:{base64.b64encode(path).decode()}"


def text_of_parts(parts: bytes) -> str | None:
    """The FetchworkSignature of a claim's parts: "<version>:<batch id>:<count>:
    <index>:", the root's signature, the proof's nodes, all raw. None when they do
    not read so: the job then goes out unsigned, and its starter refuses it, as
    when the claim finds its batch unreadable."""
    label_end = 0
    for _ in range(4):  # the version, batch id, count and index hold no ':'
        label_end = parts.find(b":", label_end) + 1
        if label_end == 0:
            return None
    signature = parts[label_end:label_end + SIGNATURE_BYTES]
    if len(signature) != SIGNATURE_BYTES or not parts[:label_end].isascii():
        return None
    return signature_text(parts[:label_end].decode("ascii"), signature,
                          parts[label_end + SIGNATURE_BYTES:])
