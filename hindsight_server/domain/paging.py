"""Opaque page tokens for List: a keyset position bound to the filters it was issued for."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.ids import canonical_memory_id
from hindsight_server.domain.model import ListQuery, PageCursor


def filter_fingerprint(query: ListQuery) -> str:
    parts = [
        query.tenant_id,
        query.subject,
        query.session_id,
        query.agent_id,
        *sorted(query.tiers),
        "|",
        *sorted(query.kinds),
    ]
    parts += ["|", *sorted(query.statuses)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def encode_page_token(cursor: PageCursor, query: ListQuery) -> str:
    payload = {"t": cursor.created_at.isoformat(), "i": cursor.memory_id, "f": filter_fingerprint(query)}
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_page_token(token: str, query: ListQuery) -> PageCursor:
    """The cursor in a token; INVALID_ARGUMENT when it is malformed or was issued for other filters."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw)
        created_at = datetime.fromisoformat(payload["t"])
        memory_id = canonical_memory_id(str(payload["i"]))
        fingerprint = payload["f"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(
            "page_token", "malformed; pass next_page_token from a previous response"
        ) from exc
    if memory_id is None or created_at.tzinfo is None:
        raise InvalidArgument("page_token", "malformed; pass next_page_token from a previous response")
    if fingerprint != filter_fingerprint(query):
        raise InvalidArgument("page_token", "was issued for different filters")
    return PageCursor(created_at=created_at, memory_id=memory_id)
