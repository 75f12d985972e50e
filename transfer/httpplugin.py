"""fetchwork's http/https transfer plugin, with HTCondor's file-transfer plugin protocol.

    fetchwork-http-plugin -classad
    fetchwork-http-plugin -infile IN -outfile OUT [-upload]

(also `python -m fetchwork.transfer.httpplugin`). `-classad` prints the
plugin's ad (SupportedMethods "http,https"). A transfer reads one ad per file
from IN (`Url`, `LocalFileName`) and writes one ad per file to OUT
(`TransferSuccess`, `TransferError`, `TransferUrl`, `TransferFileName`,
`TransferTotalBytes`, `TransferProtocol`, `TransferType`, `TransferStartTime`,
`TransferEndTime`, `TransferHTTPStatusCode`, ...); it exits 0 when every file
was transferred and 1 otherwise. After the first failure the remaining files
are not tried (the job is held anyway) and are reported as not attempted.

Downloads GET the URL (redirects followed) and stream it, a piece at a time,
into a new file beside LocalFileName that is renamed over it once complete, so
a failed download leaves nothing behind. Uploads PUT the file's bytes, streamed,
with its length; a symlink is never followed. TLS is verified against the
system's certificate store; `http_proxy`/`https_proxy` are honoured. Connection
errors, 5xx answers and 429 are tried again (three tries in all, waiting 1 s
then 2 s); other answers fail at once with the server's status.

HTCondor pre-allocates OUT so a plugin can report a full disk: it is written
from its start without being truncated first.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

METHODS = "http,https"
PIECE_BYTES = 1 << 20
# Seconds a connection or a read may stall before the try fails.
SOCKET_TIMEOUT_S = 60.0
TRIES = 3
RETRY_AFTER_S = (1.0, 2.0)
EXIT_SUCCESS = 0
EXIT_FAILURE = 1

USAGE = """usage: fetchwork-http-plugin -classad
       fetchwork-http-plugin -infile IN -outfile OUT [-upload]

fetchwork's file-transfer plugin for http:// and https:// URLs (HTCondor's
plugin protocol). -classad prints its capabilities; otherwise it transfers
each file IN names (one ClassAd per file: Url, LocalFileName), downloading by
default or uploading with -upload (HTTP PUT), and writes one ClassAd per file
to OUT. Exit code 0: every file transferred; 1: a failure (see OUT).
"""


@dataclass(frozen=True)
class Arguments:
    infile: str
    outfile: str
    upload: bool


class UsageError(Exception):
    """The command line is not one the protocol uses."""


class TransferFailed(Exception):
    """One file could not be transferred; the message is its TransferError."""

    def __init__(self, message: str, status: int | None = None, retry: bool = False):
        super().__init__(message)
        self.status = status
        self.retry = retry


def parse_arguments(argv: Sequence[str]) -> Arguments | None:
    """The transfer's arguments, or None for `-classad`; UsageError otherwise."""
    words = list(argv)
    if words == ["-classad"]:
        return None
    upload = "-upload" in words
    words = [word for word in words if word != "-upload"]
    values: dict[str, str] = {}
    while words:
        flag = words.pop(0)
        if flag not in ("-infile", "-outfile") or not words or flag in values:
            raise UsageError(f"unexpected argument {flag!r}")
        values[flag] = words.pop(0)
    if set(values) != {"-infile", "-outfile"}:
        raise UsageError("both -infile and -outfile are needed")
    return Arguments(values["-infile"], values["-outfile"], upload)


def capabilities() -> str:
    """The `-classad` answer, in the old (line per attribute) format."""
    from fetchwork import __version__
    return (f"MultipleFileSupport = true\nPluginType = \"FileTransfer\"\n"
            f"PluginVersion = \"{__version__}\"\nProtocolVersion = 2\n"
            f"SupportedMethods = \"{METHODS}\"\n")


def _context() -> ssl.SSLContext:
    return ssl.create_default_context()  # the system's CA store, hostnames checked


def _status_error(exc: urllib.error.HTTPError) -> TransferFailed:
    retry = exc.code >= 500 or exc.code == 429
    return TransferFailed(f"HTTP {exc.code} {exc.reason}".strip(), exc.code, retry)


def _copy(source: IO[bytes], target: IO[bytes]) -> int:
    total = 0
    while piece := source.read(PIECE_BYTES):
        target.write(piece)
        total += len(piece)
    return total


def download(url: str, local_path: str) -> tuple[int, int]:
    """GET `url` into `local_path`; (bytes, HTTP status). TransferFailed on failure."""
    folder = os.path.dirname(local_path) or "."
    request = urllib.request.Request(url, headers={"User-Agent": _agent()})
    fd, partial = tempfile.mkstemp(prefix=f".{os.path.basename(local_path)}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as target:
            with urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT_S,
                                        context=_context()) as answer:
                total = _copy(answer, target)
                status = answer.status
                expected = answer.headers.get("Content-Length")
        if expected is not None and expected.isdigit() and int(expected) != total:
            raise TransferFailed(f"the connection closed after {total} of {expected} bytes",
                                 status, retry=True)
        os.chmod(partial, 0o644 & ~_umask())
        os.replace(partial, local_path)
        return total, status
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def upload(url: str, local_path: str) -> tuple[int, int]:
    """PUT the file `local_path` to `url`; (bytes, HTTP status). TransferFailed on failure."""
    try:
        fd = os.open(local_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TransferFailed(f"cannot read {local_path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as source:
        size = os.fstat(source.fileno()).st_size
        request = urllib.request.Request(
            url, data=source, method="PUT",
            headers={"User-Agent": _agent(), "Content-Length": str(size),
                     "Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT_S,
                                    context=_context()) as answer:
            answer.read()
            return size, answer.status


def transfer_one(url: str, local_path: str, is_upload: bool) -> tuple[int, int]:
    """One file, tried again on connection errors and 5xx; (bytes, status)."""
    for attempt in range(TRIES):
        try:
            try:
                return (upload if is_upload else download)(url, local_path)
            except urllib.error.HTTPError as exc:
                raise _status_error(exc) from exc
            except urllib.error.URLError as exc:
                reason = exc.reason
                why = reason.strerror if isinstance(reason, OSError) and reason.strerror \
                    else str(reason)
                # A certificate that fails verification fails the same way again.
                raise TransferFailed(f"cannot reach {url}: {why}",
                                     retry=not isinstance(reason, ssl.SSLError)) from exc
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise TransferFailed(f"{type(exc).__name__}: {why}",
                                     retry=isinstance(exc, TimeoutError | ConnectionError)
                                     ) from exc
        except TransferFailed as failure:
            if not failure.retry or attempt + 1 >= TRIES:
                raise
            time.sleep(RETRY_AFTER_S[min(attempt, len(RETRY_AFTER_S) - 1)])
    raise AssertionError("unreachable")  # pragma: no cover


def result_ad(url: str, local_path: str, is_upload: bool, start_s: float, end_s: float,
              size: int | None = None, status: int | None = None,
              error: str | None = None) -> dict[str, Any]:
    ad: dict[str, Any] = {
        "TransferSuccess": error is None,
        "TransferUrl": url,
        "TransferFileName": local_path,
        "TransferProtocol": url.partition("://")[0].lower(),
        "TransferType": "upload" if is_upload else "download",
        "TransferStartTime": int(start_s),
        "TransferEndTime": int(end_s),
        "ConnectionTimeSeconds": round(end_s - start_s, 6),
    }
    if size is not None:
        ad["TransferTotalBytes"] = size
        ad["TransferFileBytes"] = size
    if status is not None:
        ad["TransferHTTPStatusCode"] = status
    if error is not None:
        ad["TransferError"] = error
    return ad


def run_transfers(arguments: Arguments) -> int:
    """Every file of the input file, answered in the output file; the exit code."""
    import classad2

    from fetchwork.errors import AdError
    from fetchwork.transfer.plugins import parse_ads

    with open(arguments.outfile, "r+b" if os.path.exists(arguments.outfile) else "wb") as out:
        def answer(ad: dict[str, Any]) -> None:
            out.write(str(classad2.ClassAd(ad)).encode("utf-8") + b"\n")
            out.flush()

        try:
            with open(arguments.infile, encoding="utf-8") as handle:
                ads = parse_ads(handle.read(), arguments.infile)
        except (OSError, UnicodeDecodeError, AdError) as exc:
            now = time.time()
            answer(result_ad("", "", arguments.upload, now, now,
                             error=f"cannot read the input file {arguments.infile}: {exc}"))
            out.truncate()
            return EXIT_FAILURE
        code = EXIT_SUCCESS
        for ad in ads:
            if "Url" not in ad and "LocalFileName" not in ad:
                continue  # protocol version 4: an ad about the job, not a file
            url, local_path = str(ad.get("Url", "")), str(ad.get("LocalFileName", ""))
            start = time.time()
            if code != EXIT_SUCCESS:
                answer(result_ad(url, local_path, arguments.upload, start, start,
                                 error="not attempted: an earlier file failed"))
                continue
            try:
                if not url.lower().startswith(("http://", "https://")) or not local_path:
                    raise TransferFailed(f"not an http or https URL with a file: {url!r}")
                size, status = transfer_one(url, local_path, arguments.upload)
                answer(result_ad(url, local_path, arguments.upload, start, time.time(),
                                 size, status))
            except TransferFailed as failure:
                answer(result_ad(url, local_path, arguments.upload, start, time.time(),
                                 status=failure.status, error=str(failure)))
                code = EXIT_FAILURE
        out.truncate()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words in (["-h"], ["--help"], ["-help"]):
        sys.stdout.write(USAGE)
        return EXIT_SUCCESS
    try:
        arguments = parse_arguments(words)
    except UsageError as exc:
        sys.stderr.write(f"fetchwork-http-plugin: {exc}\n{USAGE}")
        return EXIT_FAILURE
    if arguments is None:
        sys.stdout.write(capabilities())
        return EXIT_SUCCESS
    try:
        return run_transfers(arguments)
    except OSError as exc:
        sys.stderr.write(f"fetchwork-http-plugin: cannot write {arguments.outfile}: "
                         f"{exc.strerror or exc}\n")
        return EXIT_FAILURE


def _agent() -> str:
    from fetchwork import __version__
    return f"fetchwork-http-plugin/{__version__}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


if __name__ == "__main__":
    sys.exit(main())
