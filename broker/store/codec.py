"""Ads in Redis: a job is a hash with one field per attribute, each value msgpack.

Values are those of `config.ads.to_dict`: literals as themselves, lists as
lists, anything else `{"$expr": text}`. One field per attribute lets a Lua
script change JobStatus without decoding the rest of the ad (`cmsgpack`
reads and writes the same encoding).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import classad2
import msgpack

from fetchwork.config.ads import EXPR_KEY, from_dict, parse_expr, to_dict
from fetchwork.config.signaturetext import SIGNATURE_ATTR, text_of_parts
from fetchwork.errors import AdError, BrokerError

from .valuecheck import check_value

_LITERALS = (bool, int, float, str)
BYTES_CLIENT = "the broker needs a Redis client that returns bytes (decode_responses=False)"


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def pack_for_lua(value: Any) -> bytes:
    """msgpack in the old spec (raw strings, no bin or str8 types), which cmsgpack reads."""
    return msgpack.packb(value, use_bin_type=False)


def unpack(data: bytes | str) -> Any:
    return msgpack.unpackb(as_bytes(data), raw=False)


def as_bytes(reply: bytes | str) -> bytes:
    """A Redis reply as the bytes a store's client returns (redis-py's types allow
    text too; Store refuses a client that decodes replies)."""
    if isinstance(reply, str):
        raise BrokerError(BYTES_CLIENT)
    return reply


def text(data: bytes | str) -> str:
    return data.decode() if isinstance(data, bytes) else data


class AdNormalizer:
    """Turns ads (ClassAd or to_dict-style mappings) into checked plain dicts.

    Expression texts are parsed once per distinct text, so a big submission
    of similar ads costs one parse per different expression.
    """

    def __init__(self) -> None:
        self._checked: set[str] = set()

    def normalize(self, ad: classad2.ClassAd | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(ad, classad2.ClassAd):
            out = to_dict(ad)
            for name, value in out.items():
                check_value(name, value)
            return out
        out = {}
        for name, value in ad.items():
            if not isinstance(name, str) or not name:
                raise AdError(f"attribute name {name!r} is not a non-empty string")
            check_value(name, value)
            out[name] = self.value(name, value)
        return out

    def value(self, name: str, value: Any) -> Any:
        if type(value) in _LITERALS or isinstance(value, _LITERALS):
            return value
        if isinstance(value, Mapping) and set(value) == {EXPR_KEY}:
            expr_text = str(value[EXPR_KEY])
            if expr_text not in self._checked:
                parse_expr(expr_text, source=f"attribute {name}")
                self._checked.add(expr_text)
            return {EXPR_KEY: expr_text}
        if isinstance(value, classad2.ExprTree):
            holder = classad2.ClassAd()
            holder[name] = value
            return to_dict(holder)[name]
        # Lists, None, bytes and anything odd go through the ClassAd route,
        # which raises AdError for what an ad cannot hold.
        return to_dict(from_dict({name: value}))[name]


def fields_of(ad: Mapping[str, Any]) -> list[bytes | str]:
    """Flat [name, packed value, ...] for HSET or a script's ARGV."""
    flat: list[bytes | str] = []
    for name, value in ad.items():
        flat.append(name)
        flat.append(pack(value))
    return flat


def unique_packer() -> Callable[[Any], bytes]:
    """`pack` for many values, each packed once (one msgpack Packer, no cache)."""
    return msgpack.Packer(use_bin_type=True).pack


class FieldPacker:
    """fields_of for many ads: one msgpack Packer, and each distinct value packed once."""

    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)
        self._cache: dict[tuple[type, Any], bytes] = {}

    def fields(self, ad: Mapping[str, Any]) -> list[bytes | str]:
        flat: list[bytes | str] = []
        for name, value in ad.items():
            flat.append(name)
            flat.append(self.pack(value))
        return flat

    def pack(self, value: Any) -> bytes:
        kind = type(value)
        if kind is dict:
            key: tuple[type, Any] = (dict, value.get(EXPR_KEY))
        elif kind is list or kind is tuple:
            return self._packer.pack(value)
        else:
            key = (kind, value)
        packed = self._cache.get(key)
        if packed is None:
            packed = self._packer.pack(value)
            if len(self._cache) < 100_000:
                self._cache[key] = packed
        return packed


# The field of a claimed job's flat ad that carries the parts of its
# FetchworkSignature, raw (lua/sigbatch.lua; config/signaturetext.py).
SIGNATURE_PARTS = b"#sig"


def decode_flat(flat: Sequence[bytes]) -> dict[str, Any]:
    """A flat [name, packed value, ...] list (raw bytes) as a to_dict-style mapping;
    a claim's signature parts become its FetchworkSignature."""
    decoded = {}
    for name, value in zip(flat[0::2], flat[1::2], strict=True):
        if name == SIGNATURE_PARTS:
            text = text_of_parts(value)
            if text is not None:
                decoded[SIGNATURE_ATTR] = text
        else:
            decoded[name.decode()] = unpack(value)
    return decoded


def decode_packed_hashes(data: bytes) -> list[dict[str, Any]]:
    """read_ads.lua's reply: per job, its hash as a to_dict-style mapping ({} when missing)."""
    return list(msgpack.unpackb(data, raw=False))
