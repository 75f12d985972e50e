"""fetchwork's http/https plugin, run as the installed command against a real
HTTP server started here: downloads, uploads, a 404, and `-classad`."""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import classad2
import pytest

from fetchwork.transfer.httpplugin import parse_arguments
from fetchwork.transfer.plugins import (
    Direction,
    FileTransfer,
    parse_ads,
    query_plugin,
    resolve_plugin_path,
    run_plugin,
)
from tests.support.tlsredis import make_certs

PLUGIN = resolve_plugin_path("fetchwork-http-plugin")
BIG_BYTES = 5 * (1 << 20) + 123  # more than one piece of the stream


class Handler(http.server.BaseHTTPRequestHandler):
    """GET serves files of the server's folder; PUT stores the body there; 500 for
    the path /flaky the first time; everything else 404."""

    root: Path
    seen: list[str]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(f"GET {self.path}")
        if self.path == "/flaky" and self.seen.count("GET /flaky") == 1:
            self.send_error(503, "try again")
            return
        path = self.root / self.path.lstrip("/")
        if self.path == "/flaky":
            path = self.root / "small.txt"
        if not path.is_file():
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()
        with open(path, "rb") as handle:
            shutil.copyfileobj(handle, self.wfile)

    def do_PUT(self) -> None:  # noqa: N802
        self.seen.append(f"PUT {self.path}")
        length = int(self.headers["Content-Length"])
        target = self.root / "uploads" / self.path.lstrip("/")
        with open(target, "wb") as handle:
            remaining = length
            while remaining:
                piece = self.rfile.read(min(remaining, 1 << 16))
                if not piece:
                    break
                handle.write(piece)
                remaining -= len(piece)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, list[str]]]:
    root = tmp_path_factory.mktemp("http-root")
    (root / "uploads").mkdir()
    (root / "small.txt").write_text("hello over http\n")
    with open(root / "big.bin", "wb") as handle:
        for n in range(BIG_BYTES // 4096 + 1):
            handle.write(hashlib.sha256(str(n).encode()).digest() * 128)
        handle.truncate(BIG_BYTES)
    seen: list[str] = []
    handler = type("TestHandler", (Handler,), {"root": root, "seen": seen})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root, seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_plugin_is_installed_and_says_what_it_serves():
    plugin = query_plugin(PLUGIN)
    assert plugin.methods == ("http", "https")
    assert plugin.version
    printed = subprocess.run([str(PLUGIN), "-classad"], capture_output=True, text=True,
                             check=True).stdout
    ad = parse_ads(printed, "-classad")[0]
    assert ad["MultipleFileSupport"] is True
    assert ad["PluginType"] == "FileTransfer"
    assert ad["SupportedMethods"] == "http,https"


def test_a_download_streams_each_file_into_the_folder(server, tmp_path):
    url, root, _seen = server
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/small.txt", "small.txt"),
                                            FileTransfer(f"{url}/big.bin", "big.bin")],
                     folder=tmp_path, timeout_s=60)
    assert run.ok, run.failure()
    assert (tmp_path / "small.txt").read_text() == "hello over http\n"
    assert digest(tmp_path / "big.bin") == digest(root / "big.bin")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["big.bin", "small.txt"]


def test_a_download_into_a_subfolder_and_its_report(server, tmp_path):
    url, root, _seen = server
    (tmp_path / "data").mkdir()
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/big.bin", "data/big.bin")],
                     folder=tmp_path, timeout_s=60)
    assert run.ok, run.failure()
    assert digest(tmp_path / "data" / "big.bin") == digest(root / "big.bin")
    result = run.results[0]
    assert result.total_bytes == BIG_BYTES
    assert result.protocol == "http" and result.transfer_type == "download"
    assert result.ad["TransferHTTPStatusCode"] == 200
    assert sorted(path.name for path in (tmp_path / "data").iterdir()) == ["big.bin"]


def test_a_404_fails_with_the_status_and_a_non_zero_exit(server, tmp_path):
    url, _root, _seen = server
    files = [FileTransfer(f"{url}/missing.txt", "missing.txt"),
             FileTransfer(f"{url}/small.txt", "small.txt")]
    run = run_plugin(query_plugin(PLUGIN), files, folder=tmp_path, timeout_s=60)
    assert run.exit_code == 1 and not run.ok
    missing, after = run.results
    assert not missing.success and missing.error.startswith("HTTP 404")
    assert missing.ad["TransferHTTPStatusCode"] == 404
    assert not after.success and "not attempted" in after.error
    assert "missing.txt" in run.failure() and "HTTP 404" in run.failure()
    assert list(tmp_path.iterdir()) == []  # no partial file is left


def test_a_server_error_is_tried_again(server, tmp_path):
    url, _root, seen = server
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/flaky", "flaky.txt")],
                     folder=tmp_path, timeout_s=60)
    assert run.ok, run.failure()
    assert seen.count("GET /flaky") == 2
    assert (tmp_path / "flaky.txt").read_text() == "hello over http\n"


def test_an_upload_puts_the_file(server, tmp_path):
    url, root, seen = server
    big = tmp_path / "result.bin"
    shutil.copy(root / "big.bin", big)
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/result.bin", "result.bin")],
                     folder=tmp_path, direction=Direction.UPLOAD, timeout_s=60)
    assert run.ok, run.failure()
    assert "PUT /result.bin" in seen
    assert digest(root / "uploads" / "result.bin") == digest(big)
    assert run.results[0].total_bytes == BIG_BYTES
    assert run.results[0].transfer_type == "upload"


def test_an_upload_never_follows_a_symlink(server, tmp_path):
    url, _root, _seen = server
    secret = tmp_path / "secret"
    secret.write_text("do not send")
    (tmp_path / "link.txt").symlink_to(secret)
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/link.txt", "link.txt")],
                     folder=tmp_path, direction=Direction.UPLOAD, timeout_s=60)
    assert not run.ok and run.exit_code == 1
    assert "cannot read" in run.results[0].error


def test_an_unreachable_server_is_reported(tmp_path):
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer("http://127.0.0.1:9/x", "x")],
                     folder=tmp_path, timeout_s=60)
    assert run.exit_code == 1
    assert "cannot reach http://127.0.0.1:9/x" in run.results[0].error


def test_a_folder_that_is_not_there_fails_the_download(server, tmp_path):
    url, _root, _seen = server
    run = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/small.txt", "no/such.txt")],
                     folder=tmp_path, timeout_s=60)
    assert run.exit_code == 1
    assert "No such file or directory" in run.results[0].error


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("https-root")
    (root / "small.txt").write_text("hello over https\n")
    certs = make_certs(root / "certs")
    handler = type("TlsHandler", (Handler,), {"root": root, "seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", certs.ca
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_is_verified_against_the_systems_certificates(tls_server, tmp_path):
    url, ca = tls_server
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    refused = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/small.txt", "s.txt")],
                         folder=tmp_path, env=env, timeout_s=60)
    assert not refused.ok
    assert "CERTIFICATE_VERIFY_FAILED" in refused.results[0].error
    assert not (tmp_path / "s.txt").exists()
    # The same server, once its CA is among the certificates OpenSSL trusts.
    trusted = run_plugin(query_plugin(PLUGIN), [FileTransfer(f"{url}/small.txt", "s.txt")],
                         folder=tmp_path, env={**env, "SSL_CERT_FILE": str(ca)}, timeout_s=60)
    assert trusted.ok, trusted.failure()
    assert (tmp_path / "s.txt").read_text() == "hello over https\n"
    assert trusted.results[0].protocol == "https"


def test_the_output_file_is_written_without_truncating_first(server, tmp_path):
    url, _root, _seen = server
    infile = tmp_path / "in.ads"
    infile.write_text(str(classad2.ClassAd({"Url": f"{url}/small.txt",
                                            "LocalFileName": str(tmp_path / "s.txt")})))
    outfile = tmp_path / "out.ads"
    outfile.write_bytes(b" " * 4096)  # pre-allocated, as HTCondor does
    done = subprocess.run([str(PLUGIN), "-outfile", str(outfile), "-infile", str(infile)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    ads = parse_ads(outfile.read_text(), "out")
    assert len(ads) == 1 and ads[0]["TransferSuccess"] is True
    assert ads[0]["TransferFileName"] == str(tmp_path / "s.txt")


@pytest.mark.parametrize("argv", [[], ["-infile"], ["-infile", "a"], ["-outfile", "b", "-x"],
                                  ["-infile", "a", "-infile", "b"]])
def test_a_command_line_outside_the_protocol_is_refused(argv):
    done = subprocess.run([str(PLUGIN), *argv], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1
    assert "usage: fetchwork-http-plugin" in done.stderr


def test_the_arguments_in_any_order():
    parsed = parse_arguments(["-upload", "-outfile", "o", "-infile", "i"])
    assert parsed is not None
    assert (parsed.infile, parsed.outfile, parsed.upload) == ("i", "o", True)
    assert parse_arguments(["-classad"]) is None
