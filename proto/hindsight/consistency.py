"""Consistency tokens, the wire form of read-your-writes (the service's comment in memory.proto).

A token names a position in one database's history: the PostgreSQL cluster's system identifier (shared by
its streaming replicas, different for every other cluster) and a WAL position at or after the commit of
the change it answers. It is opaque to callers; the server and this client library are the only readers.
Base64 keeps callers from mistaking it for something to parse; the version letter leaves room for a
second form.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["TRAILER", "ReadYourWrites", "decode_token", "encode_token", "later_token"]

# The trailing-metadata key of every mutating response.
TRAILER = "hindsight-consistency-token"

_VERSION = "c1"
_LAYOUT = struct.Struct(">QQ")  # system identifier, WAL position: unsigned 64-bit each


def encode_token(database: int, position: int) -> str:
    return f"{_VERSION}.{base64.urlsafe_b64encode(_LAYOUT.pack(database, position)).decode().rstrip('=')}"


def decode_token(token: str) -> tuple[int, int]:
    """(system identifier, WAL position); ValueError saying what is wrong when it is not a token."""
    version, dot, body = token.partition(".")
    if not dot or version != _VERSION:
        raise ValueError("is not a consistency token (copy it unchanged from a mutating response)")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("is not a consistency token (its body is not base64url)") from exc
    if len(raw) != _LAYOUT.size:
        raise ValueError("is not a consistency token (wrong length)")
    database, position = _LAYOUT.unpack(raw)
    return database, position


def later_token(current: str, received: str) -> str:
    """The token to send from now on: the later position of the two. One from another database (the
    deployment was replaced) wins, since the old one can never be satisfied again."""
    if not current:
        return received
    try:
        held, got = decode_token(current), decode_token(received)
    except ValueError:
        return received
    if held[0] != got[0]:
        return received
    return received if got[1] >= held[1] else current


class ReadYourWrites:
    """The latest token received for each tenant, so the reads after a write see it. Bounded: past
    `max_tenants`, the tenant written longest ago is forgotten (its writes are long replayed by any
    replica a server still reads from, which lags at most database.max_replica_lag_ms)."""

    def __init__(self, max_tenants: int = 10_000) -> None:
        self._latest: OrderedDict[str, str] = OrderedDict()
        self._max_tenants = max_tenants

    def token(self, tenant_id: str) -> str:
        return self._latest.get(tenant_id, "")

    def forget(self, tenant_id: str) -> None:
        """Drops the tenant's token (one the database refused)."""
        self._latest.pop(tenant_id, None)

    def observe(self, tenant_id: str, trailing_metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        """Keeps the token a mutating response carried, when it carried one."""
        for key, value in trailing_metadata or ():
            if key == TRAILER:
                received = value.decode() if isinstance(value, bytes) else value
                self._latest[tenant_id] = later_token(self._latest.get(tenant_id, ""), received)
                self._latest.move_to_end(tenant_id)
                while len(self._latest) > self._max_tenants:
                    self._latest.popitem(last=False)
                return
