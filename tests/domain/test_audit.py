"""The recall audit's pure parts: the keyed query hash (what links, what does not) and the page token
(round trip, and every malformed or foreign token refused naming its field)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from hindsight_server.domain.audit import (
    AuditCursor,
    AuditQuery,
    decode_audit_token,
    encode_audit_token,
    normalised_query,
    query_hash,
)
from hindsight_server.domain.errors import InvalidArgument

KEY = b"k" * 32
AT = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
ENTRY = "7d0b3e8e-1f4c-4c52-9a8e-2b1f9c0d7e11"


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("Where do I live?", "where do i live?"),
        ("  where   do\tI\nlive? ", "where do i live?"),
        ("ＣＳＶ格式", "csv格式"),  # full width, NFKC
        ("STRASSE", "strasse"),
        ("Straße", "strasse"),  # case folding, not lower()
        ("", ""),
    ],
)
def test_queries_are_normalised_before_hashing(text: str, normalised: str) -> None:
    assert normalised_query(text) == normalised


@pytest.mark.parametrize(
    ("a", "b", "linked"),
    [
        (("acme", "Where do I live?"), ("acme", "where  do i LIVE?"), True),  # the same query
        (("acme", "CSV格式"), ("acme", "ＣＳＶ格式"), True),
        (("acme", "where do I live"), ("acme", "where do I work"), False),  # another query
        (("acme", "where do I live"), ("globex", "where do I live"), False),  # another tenant
    ],
)
def test_equal_queries_of_a_tenant_link_and_nothing_else_does(
    a: tuple[str, str], b: tuple[str, str], linked: bool
) -> None:
    assert (query_hash(KEY, *a) == query_hash(KEY, *b)) is linked


def test_the_hash_is_keyed_hmac_sha256_and_not_a_plain_digest() -> None:
    digest = query_hash(KEY, "acme", "Where do I live?")
    expected = hmac.new(KEY, b"acme\x1fwhere do i live?", hashlib.sha256).hexdigest()
    assert digest == expected and len(digest) == 64
    assert digest != hashlib.sha256(b"where do i live?").hexdigest()  # a guess cannot be tested
    assert digest != query_hash(b"another key of 32 characters....", "acme", "Where do I live?")


QUERY = AuditQuery("acme", memory_id=ENTRY, subject="ana", page_size=10)


def test_a_page_token_round_trips_and_ignores_the_page_size() -> None:
    token = encode_audit_token(AuditCursor(AT, ENTRY), QUERY)
    assert decode_audit_token(token, QUERY) == AuditCursor(AT, ENTRY)
    assert decode_audit_token(token, AuditQuery("acme", ENTRY, "ana", page_size=3)) == AuditCursor(AT, ENTRY)


def _token(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


GOOD = {"t": AT.isoformat(), "i": ENTRY, "f": QUERY.fingerprint()}


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("not base64 !!", "malformed"),
        (_token([1, 2]), "malformed"),
        (_token({"t": AT.isoformat(), "i": ENTRY}), "malformed"),  # no fingerprint
        (_token({**GOOD, "t": "yesterday"}), "malformed"),
        (_token({**GOOD, "t": "2026-03-01T12:30:00"}), "malformed"),  # no offset
        (_token({**GOOD, "i": "not-a-uuid"}), "malformed"),
        ("A" * 600, "malformed"),  # past the bound before any decoding
        (_token({**GOOD, "f": AuditQuery("acme", ENTRY, "bo").fingerprint()}), "different filters"),
        (_token({**GOOD, "f": AuditQuery("globex", ENTRY, "ana").fingerprint()}), "different filters"),
        (_token({**GOOD, "f": AuditQuery("acme", ENTRY, None).fingerprint()}), "different filters"),
    ],
)
def test_a_bad_page_token_is_refused_naming_the_field(token: str, reason: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        decode_audit_token(token, QUERY)
    assert refused.value.field == "page_token" and reason in str(refused.value)


@pytest.mark.parametrize(
    "other",
    [
        AuditQuery("acme", ENTRY, "ana", since=AT),
        AuditQuery("acme", ENTRY, "ana", until=AT),
        AuditQuery("acme", ENTRY, "ana", viewer="bot"),
        AuditQuery("acme", "", "ana"),
        AuditQuery("acme", ENTRY, ""),  # the default subject is not "any subject"
    ],
)
def test_every_filter_is_in_the_fingerprint(other: AuditQuery) -> None:
    assert other.fingerprint() != QUERY.fingerprint()
