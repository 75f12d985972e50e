"""A unix-socket proxy in front of a redis-server that a test can cut: every open
connection is dropped at once and new ones are closed as soon as they come, until
the test mends it. Clients behind it see what a network fault or a Redis that went
away looks like (connection reset, then refused), while the test and the other
daemons keep talking to the server directly."""

from __future__ import annotations

import contextlib
import os
import socket
import threading


class DropProxy:
    """Listens on `listen` and forwards each connection to the unix socket `target`."""

    def __init__(self, listen: str, target: str):
        self.listen = listen
        self.target = target
        self.url = f"unix://{listen}"
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._accepts = 0

    @property
    def accepted(self) -> int:
        """Connections accepted so far (closed at once while cut, or forwarded)."""
        return self._accepts

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.listen)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.listen)
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Drop every connection now and close new ones until `mend`."""
        self._cut.set()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            self._open.clear()

    def mend(self) -> None:
        self._cut.clear()

    def stop(self) -> None:
        self.cut()
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.listen)

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self._accepts += 1
            if self._cut.is_set():
                client.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                upstream.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
