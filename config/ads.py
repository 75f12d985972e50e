"""ClassAd plumbing: the one place that turns text and dicts into ads and back.

Hooks speak the "old" ClassAd format: one `Name = expression` per line.
Two ads travel together separated by a line `-----` (job ad, then slot ad).
Ads are stored in Redis as msgpack-friendly dicts where literals are plain
values and anything else stays an expression: `{"$expr": "<text>"}`.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import classad2

from fetchwork.config.protocol import clip
from fetchwork.errors import AdError

SEPARATOR = "-----"
EXPR_KEY = "$expr"
_ATTR_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)\Z", re.S)
_LAYOUT_RE = re.compile(r"\s*\n\s*")
# A string literal that needs no escape: printable ASCII without quote or backslash.
_PLAIN_STRING_RE = re.compile(r'[ !#-\[\]-~]*\Z')
_LITERALS = (bool, int, float, str)
# Literals read without the ClassAd parser (most of a job ad): an integer without a
# leading zero (ClassAds read 010 as octal), a string that needs no escape, a boolean.
_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]{0,17})\Z")
# A real as repr() writes it (the form format_ad gives): a fresh text per job (a lease
# expiry, a CPU time) must not reach the parser, which keeps memory per text parsed.
_REAL_RE = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+(?:e[+-]?[0-9]+)?\Z")
_PLAIN_QUOTED_RE = re.compile(r'"([ !#-\[\]-~]*)"\Z')
_BOOLEANS = {"true": True, "false": False}
# Distinct expression texts whose parse is kept (parse_expr).
PARSED_KEPT = 8192
_ABSENT = object()


def parse_ad(text: str, source: str | None = None) -> classad2.ClassAd:
    """Parse old-format ad text (`Name = expr` per line) into a ClassAd.

    Blank lines and `#` comments are skipped; a later attribute of the same
    name wins. Text starting with `[` is taken as one new-format ad. Anything
    else raises AdError naming the line.
    """
    stripped = text.strip()
    if stripped.startswith("["):
        return _parse_new(stripped, source)
    ad = classad2.ClassAd()
    for number, name, expr_text in _attribute_lines(text, source):
        ad[name] = plain_literal(expr_text, number, source)
    return ad


def _attribute_lines(text: str, source: str | None) -> Iterator[tuple[int, str, str]]:
    """(line number, name, expression text) of each `Name = expression` line of
    old-format ad text; blank lines and `#` comments skipped; AdError naming the line
    for anything else."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ATTR_RE.match(line)
        if not match:
            raise AdError(f"expected 'Name = expression', got {clip(line)!r}", number, source)
        name, expr_text = match.group(1), match.group(2).strip()
        if not expr_text:
            raise AdError(f"attribute {name} has no value", number, source)
        yield number, name, expr_text


def plain_literal(text: str, number: int | None = None, source: str | None = None) -> Any:
    """`parse_expr(text)`, with the common literals read directly (four times faster);
    the value `parse_ad` sets for an attribute's text."""
    if _INT_RE.match(text):
        return int(text)
    quoted = _PLAIN_QUOTED_RE.match(text)
    if quoted:
        return quoted.group(1)
    boolean = _BOOLEANS.get(text)
    if boolean is not None:
        return boolean
    if _REAL_RE.match(text):
        return float(text)
    return parse_expr(text, line=number, source=source)


def parse_values(text: str, source: str | None = None) -> dict[str, Any]:
    """The attributes of old-format ad text as `parse_ad` would set them (plain values
    and parse_expr's expression objects), without making a ClassAd. New-format text
    is parsed whole."""
    if text.strip().startswith("["):
        ad = _parse_new(text.strip(), source)
        return {name: ad.lookup(name) if isinstance(ad[name], classad2.ExprTree) else ad[name]
                for name in ad.keys()}
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    for number, name, expr_text in _attribute_lines(text, source):
        # A later attribute of the same name wins, under the first spelling (as in an ad).
        values[names.setdefault(name.lower(), name)] = plain_literal(expr_text, number, source)
    return values


def _parse_new(text: str, source: str | None) -> classad2.ClassAd:
    try:
        parsed = classad2.ExprTree(text).eval()
    except Exception as exc:
        raise AdError(f"not a ClassAd: {exc}".strip(), None, source) from exc
    if not isinstance(parsed, classad2.ClassAd):
        raise AdError("text starting with '[' is not a ClassAd", None, source)
    return parsed


def parse_expr(text: str, line: int | None = None, source: str | None = None) -> Any:
    """Parse one expression; literals come back as Python values, the rest as ExprTree.

    Each text is parsed once per process (the same few expressions come back in
    every job and slot ad): classad2 keeps a little memory for every ExprTree and
    ClassAd object it makes and never gives it back, so a daemon that parsed each
    ad's expressions anew would grow with every job.
    """
    try:
        return _parsed(text)
    except ValueError as exc:
        raise AdError(f"not a ClassAd expression: {clip(text)!r}", line, source) from exc


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parsed(text: str) -> Any:
    try:
        expr = classad2.ExprTree(text)
    except Exception as exc:
        raise ValueError(str(exc)) from exc
    holder = classad2.ClassAd()
    holder["x"] = expr
    value = holder["x"]
    if isinstance(value, classad2.Value):
        return expr
    if isinstance(value, classad2.ExprTree):
        _EXPRESSIONS[id(expr)] = weakref.ref(expr, functools.partial(_forget, id(expr)))
    return value if isinstance(value, _LITERALS) else expr


# parse_expr's results that an ad gives back as the object itself (not a literal,
# list, undefined or error), by id, for KeptAd (config/keptad.py).
_EXPRESSIONS: dict[int, weakref.ref[classad2.ExprTree]] = {}


def _forget(key: int, ref: weakref.ref[classad2.ExprTree]) -> None:
    if _EXPRESSIONS.get(key) is ref:
        del _EXPRESSIONS[key]


def is_parsed_expression(value: classad2.ExprTree) -> bool:
    """`value` came from parse_expr and reads back from an ad as itself."""
    ref = _EXPRESSIONS.get(id(value))
    return ref is not None and ref() is value


def format_values(values: Mapping[str, Any]) -> str:
    """`format_ad` of an ad holding `values` (as parse_values gives them), written
    from the values themselves: no ClassAd is made."""
    lines = [f"{name} = {value_text(value)}" for name, value in values.items()]
    return "\n".join(lines) + ("\n" if lines else "")


def value_text(value: Any) -> str:
    """The text of one attribute's value as set (a literal or an expression object)."""
    if isinstance(value, classad2.ExprTree):
        return unparse(value)
    if isinstance(value, classad2.Value):
        return "undefined" if value is classad2.Value.Undefined else "error"
    if isinstance(value, float):
        return _real_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"' if _PLAIN_STRING_RE.match(value) else classad2.quote(value)
    holder = classad2.ClassAd()  # a list or a nested ad: the library writes it
    holder["x"] = value
    return attr_text(holder, "x")


def format_ad(ad: classad2.ClassAd | Mapping[str, Any]) -> str:
    """Old-format text of an ad, one `Name = expr` per line, newline-terminated."""
    if not isinstance(ad, classad2.ClassAd):
        ad = from_dict(ad)
    lines = []
    for name in ad.keys():
        lines.append(f"{name} = {attr_text(ad, name)}")
    return "\n".join(lines) + ("\n" if lines else "")


class AdText(str):
    """The text of an ad (`format_ad`) that also carries the ad's values (as
    `parse_values` gives them), so a reader in the same process takes them
    (`take`) instead of parsing the text back. An in-process hook returns one;
    to anyone else it is the text. Made from a dict of stored values (`to_dict`'s
    form), it makes no ClassAd at all."""

    _values: dict[str, Any] | None

    def __new__(cls, ad: classad2.ClassAd | Mapping[str, Any]) -> AdText:
        if isinstance(ad, classad2.ClassAd):
            values = {name: ad[name] for name in ad.keys()}
            text = super().__new__(cls, format_ad(ad))
        else:
            values = values_of(ad)
            text = super().__new__(cls, format_values(values))
        text._values = values
        return text

    @classmethod
    def carrying(cls, text: str, values: dict[str, Any]) -> AdText:
        """`text` as it is, carrying `values`: those of its first ad, when `text` is a
        pair (`join_texts`) whose first ad was parsed into them."""
        made = super().__new__(cls, text)
        made._values = values
        return made

    def take(self) -> dict[str, Any] | None:
        """The values, to the first reader only (it may change them); None after."""
        values, self._values = self._values, None
        return values


def parse_taken(text: str, source: str | None = None) -> dict[str, Any]:
    """`parse_values`, or the values an AdText carries when it is the first to ask."""
    values = text.take() if isinstance(text, AdText) else None
    return values if values is not None else parse_values(text, source)


def unparse(expr: classad2.ExprTree) -> str:
    """ClassAd text of one expression on one line.

    String literals use the new ClassAd escapes (`\\n`, `\\\\`, `\\"`), which
    `parse_ad` reads back; a value never spans lines.
    """
    # str() escapes every newline inside a string literal, so the line breaks
    # left are layout (lists and nested ads) and can be folded away.
    return _LAYOUT_RE.sub(" ", str(expr)).strip()


def attr_text(ad: classad2.ClassAd, name: str) -> str:
    """The text of attribute `name`; a real literal keeps every digit (repr)."""
    value = ad[name]
    if isinstance(value, float):
        return _real_text(value)
    # Plain literals are written here: classad2's lookup() keeps a little
    # memory per call that it never gives back, and ads are formatted often.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not isinstance(value, classad2.Value):
        return str(value)
    if isinstance(value, str) and _PLAIN_STRING_RE.match(value):
        return f'"{value}"'
    return unparse(value if isinstance(value, classad2.ExprTree) else ad.lookup(name))


def _real_text(value: float) -> str:
    # The library prints reals with 16 significant digits, which loses the
    # last bit of some doubles; repr() is the shortest exact form.
    if value != value:
        return 'real("NaN")'
    if value in (float("inf"), float("-inf")):
        return ('-' if value < 0 else '') + 'real("INF")'
    return repr(value)


def join_pair(first: classad2.ClassAd | Mapping[str, Any],
              second: classad2.ClassAd | Mapping[str, Any] | None) -> str:
    """`first`, a `-----` line, `second`: the job-ad/slot-ad framing hooks read."""
    return join_texts(format_ad(first), format_ad(second) if second is not None else "")


def join_texts(first: str, second: str) -> str:
    """`join_pair` of two ads' texts."""
    if first and not first.endswith("\n"):
        first += "\n"
    return first + SEPARATOR + "\n" + second


def split_pair(text: str, source: str | None = None
               ) -> tuple[classad2.ClassAd, classad2.ClassAd | None]:
    """Inverse of `join_pair`; the second ad is None when there is no separator."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.strip() == SEPARATOR:
            first = parse_ad("".join(lines[:index]), source)
            second_text = "".join(["\n"] * (index + 1) + lines[index + 1:])
            return first, parse_ad(second_text, source)
    return parse_ad(text, source), None


def first_of_pair(text: str, source: str | None = None) -> classad2.ClassAd:
    """The first ad of a `join_pair` text, the second left unparsed (a hook that
    needs only the job ad pays for no slot ad)."""
    cut = text.find("\n" + SEPARATOR + "\n")
    if cut < 0 and not text.startswith(SEPARATOR + "\n"):
        return split_pair(text, source)[0]  # framing with other spacing
    return parse_ad(text[:cut + 1] if cut >= 0 else "", source)


def evaluate(expr: str | classad2.ExprTree, my: classad2.ClassAd | None = None,
             target: classad2.ClassAd | None = None) -> Any:
    """Evaluate `expr` with MY = `my` and TARGET = `target`.

    Returns a Python value, or classad2.Value.Undefined / Value.Error.
    """
    if isinstance(expr, str):
        expr = parse_expr(expr)
    return _value_of(expr, my, target)


def _value_of(value: Any, my: classad2.ClassAd | None, target: classad2.ClassAd | None) -> Any:
    """An expression's value with MY = `my` and TARGET = `target`; a literal as it is."""
    if not isinstance(value, classad2.ExprTree):
        return value
    try:
        return value.eval(my, target)
    except Exception as exc:
        raise AdError(f"cannot evaluate {unparse(value)}: {exc}") from exc


def evaluate_attr(ad: classad2.ClassAd, name: str,
                  target: classad2.ClassAd | None = None,
                  absent: Any = classad2.Value.Undefined) -> Any:
    """Evaluate attribute `name` of `ad` (MY = ad); `absent` when it is not there.

    A literal comes back as the Python value it is stored as: no ExprTree object is
    made for it (classad2 keeps a little memory for each one; `in` makes one too).
    """
    value = ad.get(name, _ABSENT)
    return absent if value is _ABSENT else _value_of(value, ad, target)


def as_bool(value: Any, default: bool = False) -> bool:
    """A ClassAd result as a boolean: numbers are non-zero; undefined/error give `default`."""
    if isinstance(value, classad2.Value):  # an IntEnum: must be checked before int
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return default


def as_number(value: Any, default: float | None = None) -> float | None:
    """A ClassAd result as a number (booleans are 0/1); anything else gives `default`."""
    if isinstance(value, classad2.Value):
        return default
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return default


def to_dict(ad: classad2.ClassAd) -> dict[str, Any]:
    """A msgpack-friendly dict: literals as values, expressions as {"$expr": text}."""
    out: dict[str, Any] = {}
    for name in ad.keys():
        value = ad[name]
        if isinstance(value, classad2.Value):  # undefined/error: an IntEnum, not a literal
            out[name] = {EXPR_KEY: unparse(ad.lookup(name))}
        elif isinstance(value, _LITERALS):
            out[name] = value
        else:
            out[name] = {EXPR_KEY: unparse(ad.lookup(name))}
    return out


def from_dict(data: Mapping[str, Any]) -> classad2.ClassAd:
    """Inverse of `to_dict`; also accepts plain values (lists become ClassAd lists)."""
    ad = classad2.ClassAd()
    for name, value in data.items():
        ad[name] = _value_to_expr(name, value)
    return ad


def values_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """The values `from_dict(data)` would set, without making the ClassAd."""
    return {name: _value_to_expr(name, value) for name, value in data.items()}


def _value_to_expr(name: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        if set(value) == {EXPR_KEY}:
            return parse_expr(str(value[EXPR_KEY]), source=f"attribute {name}")
        raise AdError(f"attribute {name}: a nested mapping must be {{'{EXPR_KEY}': text}}")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value is None:
        return classad2.ExprTree("undefined")
    if isinstance(value, list | tuple):
        items = ", ".join(unparse(_as_tree(_value_to_expr(name, item))) for item in value)
        return classad2.ExprTree("{" + items + "}")
    if isinstance(value, _LITERALS):
        return value
    raise AdError(f"attribute {name}: cannot store a {type(value).__name__} in an ad")


def _as_tree(value: Any) -> classad2.ExprTree:
    if isinstance(value, classad2.ExprTree):
        return value
    holder = classad2.ClassAd()
    holder["x"] = value
    return holder.lookup("x")
