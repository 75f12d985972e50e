"""The autocluster index's member format: what lua/acindex.lua writes and claims read.

`ac:members` holds every idle job as "<autocluster id>|<order>|<job id>",
all scores 0, so a ZRANGEBYLEX on "[<id>|" gives an autocluster's idle jobs
in priority order. The order is FetchworkOrder shifted to be non-negative
and spelt in fixed-width digits that sort as the number. The Lua scripts
get these constants from a header that store/scripts.py generates, so
Python and Lua spell members alike.
"""

from __future__ import annotations

# |FetchworkOrder| < 2^52 (priority within +-2^18, 2^34 positions each); shifted
# by this it is never negative and still exact in a Lua number.
ORDER_OFFSET = 2**52
# The shifted order in a member: ORDER_WIDTH digits of base 64, the digits being
# the 64 ASCII characters from ORDER_ZERO on (in byte order, so a ZRANGEBYLEX
# sorts members by order): 9 characters hold 2^54, where 16 decimal digits
# did; an index member is one allocation size smaller.
ORDER_WIDTH = 9
ORDER_ZERO = ord("0")
ORDER_BASE = 64
# Group ids before base64: their members spell the order in LEGACY_ORDER_WIDTH
# decimal digits, so a queue written by an older broker keeps its index.
LEGACY_GROUP_ID_LENGTH = 16
LEGACY_ORDER_WIDTH = 16
SEPARATOR = "|"
# The job attribute that names its autocluster (group id; '' or absent: none).
AUTOCLUSTER_ATTR = "FetchworkAutocluster"


def order_text(gid: str, order: int) -> str:
    """FetchworkOrder `order` as group `gid`'s members spell it (fixed width, sorting
    as the number; lua/acindex.lua order_text does the same)."""
    shifted = order + ORDER_OFFSET
    if len(gid) == LEGACY_GROUP_ID_LENGTH:
        return f"{shifted:0{LEGACY_ORDER_WIDTH}d}"
    digits = []
    for _ in range(ORDER_WIDTH):
        shifted, digit = divmod(shifted, ORDER_BASE)
        digits.append(chr(ORDER_ZERO + digit))
    return "".join(reversed(digits))


def order_value(text: str) -> int:
    """The FetchworkOrder that order_text spelt (either way: by its width)."""
    if len(text) == LEGACY_ORDER_WIDTH:
        return int(text) - ORDER_OFFSET
    shifted = 0
    for char in text:
        shifted = shifted * ORDER_BASE + ord(char) - ORDER_ZERO
    return shifted - ORDER_OFFSET


def member(gid: str, order: int, job_id: str) -> str:
    """The `ac:members` entry of a job: sorts by group, then priority order."""
    return f"{gid}{SEPARATOR}{order_text(gid, order)}{SEPARATOR}{job_id}"


def parse_member(text: str) -> tuple[str, int, str]:
    """(group id, order, job id) of an `ac:members` entry."""
    gid, order, job_id = text.split(SEPARATOR, 2)
    return gid, order_value(order), job_id
