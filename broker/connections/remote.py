"""How to reach a remote broker: TLS files, a Redis user and its password file.

`FETCHWORK_BROKER` names the Redis (`redis://host:6379/0`, `rediss://` for
TLS, `unix:///path`). For `rediss://`, `FETCHWORK_BROKER_CA` is the CA bundle
the server's certificate must chain to, and `FETCHWORK_BROKER_CERT` with
`FETCHWORK_BROKER_KEY` are this client's certificate and key when the server
asks for one. `FETCHWORK_BROKER_USERNAME` (or the user part of the URL) is the
Redis ACL user, whose password is the first line of
`FETCHWORK_BROKER_PASSWORD_FILE`. A password is never taken from the URL or a
command line, and never appears in a log line or an error message.

`redis+sentinel://host:port[,host:port...]/mastername[/db]` (`rediss+sentinel://`
for TLS) names a master set watched by Redis Sentinel (broker/connections/sentinel.py).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError

from .sentinel import check_sentinel_url, is_sentinel_url, parse_sentinel_url

SCHEMES = ("redis://", "rediss://", "unix://")
TLS_FILES = {"FETCHWORK_BROKER_CA": "ssl_ca_certs", "FETCHWORK_BROKER_CERT": "ssl_certfile",
             "FETCHWORK_BROKER_KEY": "ssl_keyfile"}


def check_url(url: str) -> str:
    """`url` when it is a Redis URL without a password in it; else a clear error."""
    if is_sentinel_url(url):  # Redis Sentinel: its own rules
        return check_sentinel_url(url)
    if not url.startswith(SCHEMES):
        raise RedisUnavailableError(
            f"FETCHWORK_BROKER={redacted(url)!r} is not a redis://, rediss://, unix:// "
            "or redis+sentinel:// URL")
    if urlsplit(url).password is not None:
        raise RedisUnavailableError(
            f"FETCHWORK_BROKER={redacted(url)!r} carries a password; put the password in the "
            "file named by FETCHWORK_BROKER_PASSWORD_FILE instead")
    return url


def redacted(url: str) -> str:
    """`url` with any password replaced by `***` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "<unreadable URL>"


def read_password(path: str) -> str:
    """The first line of the password file `path` (keep it readable by its owner only)."""
    try:
        with open(path, encoding="utf-8") as handle:
            first = handle.readline().rstrip("\r\n")
    except OSError as exc:
        raise RedisUnavailableError(
            f"cannot read FETCHWORK_BROKER_PASSWORD_FILE {path}: {exc.strerror}") from exc
    if not first:
        raise RedisUnavailableError(f"FETCHWORK_BROKER_PASSWORD_FILE {path} is empty")
    return first


def client_options(url: str, config: Config) -> dict[str, Any]:
    """The redis-py keyword arguments `url` needs beyond itself: TLS files and credentials."""
    options: dict[str, Any] = {}
    tls = url.startswith(("rediss://", "rediss+sentinel://"))
    for knob, option in TLS_FILES.items():
        path = (config.get(knob) or "").strip()
        if not path:
            continue
        if not tls:
            raise RedisUnavailableError(
                f"{knob} is set but FETCHWORK_BROKER={redacted(url)!r} is not a rediss:// URL")
        if not os.access(path, os.R_OK):
            raise RedisUnavailableError(f"{knob} names {path}, which is not a readable file")
        options[option] = path
    if tls:
        options["ssl_cert_reqs"] = "required"  # without FETCHWORK_BROKER_CA: the system's CAs
    username = (config.get("FETCHWORK_BROKER_USERNAME") or "").strip()
    if is_sentinel_url(url):
        url_user = parse_sentinel_url(url).username
    else:
        url_user = urlsplit(url).username if not url.startswith("unix://") else None
    if username:
        options["username"] = username
    elif url_user:
        options["username"] = unquote(url_user)
    password_file = (config.get("FETCHWORK_BROKER_PASSWORD_FILE") or "").strip()
    if password_file:
        options["password"] = read_password(password_file)
    elif "username" in options:
        raise RedisUnavailableError(
            f"the Redis user {options['username']!r} needs FETCHWORK_BROKER_PASSWORD_FILE, "
            "a file whose first line is its password")
    return options
