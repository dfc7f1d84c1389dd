"""A PostgreSQL connection string as it may be shown or logged: without any password.

libpq and asyncpg take a password in three places: the URI's userinfo (`user:secret@host`), a query
parameter (`?password=secret`, and `sslpassword=` for an encrypted client key), and, for libpq, the
keyword/value form (`host=h password=secret`). Every parameter whose name holds "password" is removed,
the rest is kept as written.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

__all__ = ["without_credentials"]

_KEYWORD_PASSWORD = re.compile(r"""\s*\b\w*password\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S*)""", re.IGNORECASE)


def _secret(parameter: str) -> bool:
    name = unquote(parameter.partition("=")[0]).lower()
    return "password" in name


def without_credentials(dsn: str) -> str:
    if "://" not in dsn:  # the keyword/value form
        return _KEYWORD_PASSWORD.sub("", dsn).strip()
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if parts.password is not None:
        user = f"{parts.username}@" if parts.username else ""
        netloc = user + netloc.rpartition("@")[2]
    query = "&".join(parameter for parameter in parts.query.split("&") if not _secret(parameter))
    # Put together by hand: urlunsplit drops the empty host of postgresql:///db?host=/socket.
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
