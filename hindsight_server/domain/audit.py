"""The recall audit: what one recall served (who asked, when, a keyed hash of the query, the ids it
returned and packed), the query over those records, and its page token. Pure.

The query's hash is HMAC-SHA256 keyed with the server-side `audit.query_hash_key`, over the tenant and
the query normalised (Unicode NFKC, case folded, runs of whitespace made one space, trimmed): equal
queries of a tenant hash alike, so an auditor can link them, while one tenant's hash says nothing about
another's (the tenant is in the message) and nobody without the key can test guesses against a hash (a
plain SHA-256 of a short query is a dictionary look-up away from its text).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.ids import canonical_memory_id

__all__ = [
    "AuditCursor",
    "AuditPage",
    "AuditQuery",
    "RecallServed",
    "decode_audit_token",
    "encode_audit_token",
    "normalised_query",
    "query_hash",
]

_SPACES = re.compile(r"\s+")
MAX_TOKEN_CHARS = 512  # ours are ~120 characters; json would recurse into a deep one


def normalised_query(text: str) -> str:
    """The form of a query that is hashed: NFKC, case folded, whitespace runs as one space, trimmed."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def query_hash(key: bytes, tenant_id: str, text: str) -> str:
    """HMAC-SHA256 (hex) of the tenant and the normalised query under the server-side key."""
    message = tenant_id.encode() + b"\x1f" + normalised_query(text).encode("utf-8", "surrogatepass")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class RecallServed:
    """One recall of an audited tenant, as recorded (and as its recall.served event tells it)."""

    id: str  # the audit entry's, and its event's
    tenant_id: str
    at: datetime
    request_id: str
    subject: str
    agent_id: str
    query_hash: str
    query_text: str | None  # only for the tenants whose audit keeps the text
    returned_ids: tuple[str, ...]  # in rank order
    packed_ids: tuple[str, ...]  # those packed into the injection text, in rank order


@dataclass(frozen=True, slots=True, order=True)
class AuditCursor:
    """A position in the newest-first order: the entries strictly older than (at, id) follow it."""

    at: datetime
    id: str


@dataclass(frozen=True, slots=True)
class AuditQuery:
    tenant_id: str
    memory_id: str = ""  # only the recalls that returned this memory
    subject: str | None = None  # only this subject's recalls ("" is the default subject)
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive
    viewer: str | None = None  # an agent-bound key: its own recalls only
    page_size: int = 50
    after: AuditCursor | None = field(default=None, compare=False)

    def fingerprint(self) -> str:
        """What a page token is bound to: every filter (not the page size, not the position)."""
        parts = [
            self.tenant_id,
            self.memory_id,
            "\x00" if self.subject is None else self.subject,
            "" if self.since is None else self.since.isoformat(),
            "" if self.until is None else self.until.isoformat(),
            "" if self.viewer is None else self.viewer,
        ]
        return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class AuditPage:
    entries: Sequence[RecallServed]
    next_cursor: AuditCursor | None  # None: the last page


def encode_audit_token(cursor: AuditCursor, query: AuditQuery) -> str:
    payload = {"t": cursor.at.isoformat(), "i": cursor.id, "f": query.fingerprint()}
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_audit_token(token: str, query: AuditQuery, field_name: str = "page_token") -> AuditCursor:
    """The position in a token; INVALID_ARGUMENT naming the field when it is malformed, too long, or
    was issued for other filters."""
    malformed = InvalidArgument(field_name, "malformed; pass next_page_token from a previous response")
    if len(token) > MAX_TOKEN_CHARS:
        raise malformed
    try:
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        at = datetime.fromisoformat(payload["t"])
        entry_id = canonical_memory_id(str(payload["i"]))
        fingerprint = payload["f"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise malformed from exc
    if entry_id is None or at.tzinfo is None:
        raise malformed
    if fingerprint != query.fingerprint():
        raise InvalidArgument(field_name, "was issued for different filters")
    return AuditCursor(at, entry_id)
