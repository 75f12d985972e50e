"""A chunk's GET read from the socket straight into a buffer its caller reuses.

redis-py hands a reply of a few MiB over as new bytes, after its parser gathered
it piece by piece in a buffer of its own: three copies of every byte and a new
allocation a chunk. A download reads every byte of a big input once this way,
so `ChunkGetter` sends the GET on a connection of its own, made with the
client's connection class and settings (its address, credentials and TLS),
and reads the reply itself: the bulk string's header, then the bytes,
received into the caller's buffer, once.

The connection serves these GETs only, so nothing of a reply is ever left in
the client's parser. A reply that is not a bulk string (an
error, a null for a missing chunk) is read whole; anything unexpected, and any
fault of the socket, drops the connection, so the next GET starts on a new one.
A fault of the socket is raised as the client's ConnectionError or TimeoutError,
as a `GET` through the client would raise it (a transfer interrupted that way
requeues its job; it does not hold it).
"""

from __future__ import annotations

import mmap
import socket
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fetchwork.broker.store import Store
from fetchwork.errors import TransferError

# A bulk string's header ("$4194240\r\n") is far shorter.
_HEADER_BYTES = 64


class _RawSocket:
    """Mixed into the client's own connection class: its socket, to read a reply
    from without the client's parser."""

    _sock: socket.socket | None

    def raw_socket(self) -> socket.socket | None:
        return self._sock


class ChunkGetter:
    """GETs of chunks by digest on one connection, each into a caller's buffer."""

    def __init__(self, store: Store):
        self.store = store
        self._connection: Any = None

    def _connect(self) -> Any:
        """A connection of the client's own class and settings (address, credentials,
        TLS), with access to its socket; made once, reconnected after a fault."""
        if self._connection is None:
            pool = self.store.client.connection_pool
            kind = type("ChunkConnection", (_RawSocket, pool.connection_class), {})
            self._connection = kind(**pool.connection_kwargs)
        return self._connection

    def get_into(self, digest: str, buffer: bytearray | mmap.mmap) -> memoryview | None:
        """Chunk `digest` read into `buffer`: the part of it the chunk fills (not checked
        here); None when the pool lacks it. TransferError when the pool's value is
        longer than `buffer` (no chunk of this pool is)."""
        connection = self._connect()
        try:
            connection.send_command("GET", self.store.keys.xfer_chunk(digest))
            sock = connection.raw_socket()  # connected by send_command
            if sock is None:
                raise RedisConnectionError("the connection to the pool's Redis closed")
            return self._read_reply(sock, digest, buffer)
        except TimeoutError as exc:
            self.close()
            raise RedisTimeoutError(f"reading a chunk from the pool's Redis: {exc}") from exc
        except OSError as exc:
            self.close()
            raise RedisConnectionError(f"reading a chunk from the pool's Redis: "
                                       f"{exc.strerror or exc}") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the connection (a fault: the next GET starts on a new one)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.disconnect()

    def _read_reply(self, sock: socket.socket, digest: str,
                    buffer: bytearray | mmap.mmap) -> memoryview | None:
        header = bytearray(_HEADER_BYTES)
        got = 0
        while (end := header.find(b"\r\n", 0, got)) < 0:
            if got == len(header):
                raise RedisConnectionError("the pool's Redis sent a reply this client "
                                           "does not understand")
            count = sock.recv_into(memoryview(header)[got:])
            if not count:
                raise RedisConnectionError("the pool's Redis closed the connection")
            got += count
        line, rest = bytes(header[:end]), memoryview(header)[end + 2:got]
        kind = line[:1]
        if kind == b"-":
            if rest:
                raise RedisConnectionError("the pool's Redis sent more than its reply")
            raise ResponseError(line[1:].decode("utf-8", "replace"))
        if line in (b"$-1", b"_"):  # a null: the pool lacks the chunk
            if rest:
                raise RedisConnectionError("the pool's Redis sent more than its reply")
            return None
        if kind != b"$" or not line[1:].isdigit():
            raise RedisConnectionError("the pool's Redis sent a reply this client does "
                                       "not understand")
        length = int(line[1:])
        if length > len(buffer):
            # Its bytes stay unread on the connection: it is dropped (the caller's
            # `except BaseException`).
            raise TransferError(f"a chunk in the pool is longer than a chunk "
                                f"({digest[:12]}, {length} bytes)")
        view = memoryview(buffer)
        first = min(len(rest), length)
        view[:first] = rest[:first]
        trailer = bytearray(rest[first:])  # any of the final CRLF read already
        filled = first
        while filled < length:
            count = sock.recv_into(view[filled:length])
            if not count:
                raise RedisConnectionError("the pool's Redis closed the connection")
            filled += count
        while len(trailer) < 2:
            more = sock.recv(2 - len(trailer))
            if not more:
                raise RedisConnectionError("the pool's Redis closed the connection")
            trailer += more
        if trailer != b"\r\n":
            raise RedisConnectionError("the pool's Redis sent more than its reply")
        return view[:length]
