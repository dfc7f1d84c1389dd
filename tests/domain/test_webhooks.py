"""The pure parts of webhooks: the Standard Webhooks signature (checked by the reference library), the
body, the retry schedule, the URL and address policy, the filters' bounds."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.feed import ChangeEvent, Cursor, EventType
from hindsight_server.domain.webhooks import (
    AddressPolicy,
    RetryPolicy,
    after_failure,
    delivered_types,
    event_body,
    format_secret,
    parse_filters,
    parse_url,
    retry_delay_s,
    sign,
    signature_header,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
KEY_A, KEY_B = bytes(range(32)), bytes(range(32, 64))


def _event(content: str | None = None) -> ChangeEvent:
    return ChangeEvent(
        id="7d6f0c9e-0000-4000-8000-000000000001",
        cursor=Cursor(812, 3),
        tenant_id="acme",
        type=EventType.CREATED,
        at=NOW,
        memory_id="2b0c0d4e-0000-4000-8000-000000000002",
        subject="ana",
        kind="preference",
        resolution="created",
        version=1,
        fields=("content",),
        content=content,
    )


# ------------------------------------------------------------------------------------------ signing


def test_the_secret_is_whsec_and_base64_of_the_key() -> None:
    secret = format_secret(KEY_A)
    assert secret.startswith("whsec_") and base64.b64decode(secret[6:]) == KEY_A


def test_a_known_signature() -> None:
    # HMAC-SHA256(key 00..1f, "msg_1.1700000000.{}") computed apart (openssl dgst -sha256 -hmac ...).
    expected = Webhook(format_secret(KEY_A)).sign("msg_1", datetime.fromtimestamp(1_700_000_000, UTC), "{}")
    assert sign(format_secret(KEY_A), "msg_1", 1_700_000_000, b"{}") == expected


@pytest.mark.parametrize(
    ("signing", "verifying", "valid"),
    [
        ([KEY_A], KEY_A, True),
        ([KEY_A], KEY_B, False),
        ([KEY_B, KEY_A], KEY_A, True),  # a rotation: the new and the previous secret both sign
        ([KEY_B, KEY_A], KEY_B, True),
        ([KEY_B], KEY_A, False),  # the previous one expired
    ],
)
def test_the_reference_library_verifies_what_the_server_signs(
    signing: list[bytes], verifying: bytes, valid: bool
) -> None:
    body = event_body(_event(), 10_000)
    stamp = int(datetime.now(UTC).timestamp())
    header = signature_header([format_secret(k) for k in signing], "evt_1", stamp, body)
    headers = {"webhook-id": "evt_1", "webhook-timestamp": str(stamp), "webhook-signature": header}
    assert len(header.split(" ")) == len(signing)
    if valid:
        assert Webhook(format_secret(verifying)).verify(body, headers)["id"] == _event().id
    else:
        with pytest.raises(WebhookVerificationError):
            Webhook(format_secret(verifying)).verify(body, headers)


def test_a_changed_body_or_id_no_longer_verifies() -> None:
    body = event_body(_event(), 10_000)
    stamp = int(datetime.now(UTC).timestamp())
    header = signature_header([format_secret(KEY_A)], "evt_1", stamp, body)
    webhook = Webhook(format_secret(KEY_A))
    for changed_body, changed_id in ((body.replace(b"ana", b"bob"), "evt_1"), (body, "evt_2")):
        with pytest.raises(WebhookVerificationError):
            webhook.verify(
                changed_body,
                {"webhook-id": changed_id, "webhook-timestamp": str(stamp), "webhook-signature": header},
            )


# --------------------------------------------------------------------------------------------- body


def test_the_body_is_the_event_and_content_only_when_it_has_some() -> None:
    plain = json.loads(event_body(_event(), 10_000))
    assert plain == {
        "type": "created",
        "id": _event().id,
        "cursor": "812.3",
        "at": NOW.isoformat(),
        "memory_id": _event().memory_id,
        "subject": "ana",
        "kind": "preference",
        "resolution": "created",
        "version": 1,
        "fields": ["content"],
    }
    assert json.loads(event_body(_event("Ana likes tea"), 10_000))["content"] == "Ana likes tea"


@pytest.mark.parametrize(
    ("changes", "extra"),
    [
        ({"type": EventType.CONSOLIDATED, "session_id": "s-1"}, {"session_id": "s-1"}),
        ({"type": EventType.ERASURE_FINISHED, "erasure_id": "e-1"}, {"erasure_id": "e-1"}),
        (
            {"type": EventType.RECALL_SERVED, "memory_ids": ("a", "b"), "packed_ids": ("a",)},
            {"memory_ids": ["a", "b"], "packed_ids": ["a"]},
        ),
    ],
)
def test_a_type_s_own_fields_are_in_its_body_only(
    changes: dict[str, object], extra: dict[str, object]
) -> None:
    body = json.loads(event_body(replace(_event(), **changes), 10_000))  # type: ignore[arg-type]
    assert {k: body[k] for k in extra} == extra
    assert not {"session_id", "erasure_id", "memory_ids", "packed_ids"} - set(extra) & set(body)


@pytest.mark.parametrize(
    ("named", "sent_recalls"),
    [((), False), (("created",), False), (("recall.served",), True), (("created", "recall.served"), True)],
)
def test_an_endpoint_gets_served_recalls_only_when_it_names_them(
    named: tuple[str, ...], sent_recalls: bool
) -> None:
    types = delivered_types(parse_filters(named, (), 64))
    assert (EventType.RECALL_SERVED in types) is sent_recalls
    assert EventType.CREATED in types or named == ("recall.served",)


def test_content_past_the_body_bound_is_left_out_and_said_so() -> None:
    body = event_body(_event("x" * 5_000), 2_000)
    document = json.loads(body)
    assert len(body) <= 2_000 and "content" not in document and document["content_omitted"] is True


# ------------------------------------------------------------------------------------------ retries

POLICY = RetryPolicy(base_s=1.0, cap_s=600.0, max_attempts=5, max_age=timedelta(hours=1))


@pytest.mark.parametrize(
    ("attempts", "unit_random", "delay_s"),
    [
        (1, 0.999, 0.999),  # [0, 1)
        (2, 0.5, 1.0),  # [0, 2)
        (3, 0.5, 2.0),  # [0, 4)
        (10, 1.0, 512.0),
        (11, 1.0, 600.0),  # capped
        (1_000, 0.5, 300.0),  # no overflow far out
        (4, 0.0, 0.0),  # full jitter: may retry at once
    ],
)
def test_backoff_is_exponential_with_full_jitter_and_capped(
    attempts: int, unit_random: float, delay_s: float
) -> None:
    assert retry_delay_s(POLICY, attempts, unit_random) == pytest.approx(delay_s)


@pytest.mark.parametrize(
    ("attempts_before", "failing_for", "dead"),
    [
        (0, None, False),
        (3, timedelta(minutes=5), False),
        (4, timedelta(minutes=5), True),  # the fifth attempt failed
        (1, timedelta(hours=1), True),  # failing for the max age
    ],
)
def test_an_endpoint_dies_after_its_attempts_or_its_age(
    attempts_before: int, failing_for: timedelta | None, dead: bool
) -> None:
    since = None if failing_for is None else NOW - failing_for
    failure = after_failure(POLICY, attempts_before, since, NOW, 0.5)
    assert failure.attempts == attempts_before + 1
    assert failure.failing_since == (since or NOW)
    assert failure.dead is dead
    assert NOW <= failure.next_attempt_at <= NOW + timedelta(seconds=600)


# ------------------------------------------------------------------------------------------------ URL


@pytest.mark.parametrize(
    ("text", "host", "port", "target"),
    [
        ("https://hooks.example.com/in", "hooks.example.com", 443, "/in"),
        ("http://Hooks.Example.com:8080/a/b?x=1", "hooks.example.com", 8080, "/a/b?x=1"),
        ("https://[2001:db8::1]/h", "2001:db8::1", 443, "/h"),
        ("http://93.184.216.34", "93.184.216.34", 80, "/"),
    ],
)
def test_urls_taken(text: str, host: str, port: int, target: str) -> None:
    url = parse_url(text, 2_048)
    assert (url.host, url.port, url.target) == (host, port, target)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "required"),
        ("ftp://example.com/x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://user@example.com/", "credentials"),
        ("https://example.com/#frag", "fragment"),
        ("https:///path", "no host"),
        ("https://exa mple.com/", "printable ASCII"),
        ("https://exämple.com/", "printable ASCII"),
        ("https://example.com:99999/", "not a URL"),
        ("https://-bad-.example/", "neither a host name"),
        ("https://example.com/" + "a" * 3_000, "at most 2048"),
    ],
)
def test_urls_refused_name_the_field(text: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason) as refused:
        parse_url(text, 2_048)
    assert refused.value.field == "url"


def test_the_connection_url_carries_the_checked_address_and_the_host_header_the_name() -> None:
    url = parse_url("https://hooks.example.com:8443/in?x=1", 2_048)
    assert url.with_address("93.184.216.34") == "https://93.184.216.34:8443/in?x=1"
    assert url.with_address("2001:db8::1") == "https://[2001:db8::1]:8443/in?x=1"
    assert url.host_header == "hooks.example.com:8443"
    assert parse_url("https://hooks.example.com/", 2_048).host_header == "hooks.example.com"


# ------------------------------------------------------------------------------------------ addresses


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not globally routable"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: judged as its IPv4 address
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("93.184.216.34", ""),
        ("2606:2800:220:1:248:1893:25c8:1946", ""),
        ("::ffff:93.184.216.34", ""),
    ],
)
def test_only_public_addresses_by_default(address: str, why: str) -> None:
    assert AddressPolicy().refusal(address) == why


@pytest.mark.parametrize(
    ("policy", "address", "allowed"),
    [
        (AddressPolicy.of(False, ["127.0.0.1/32"]), "127.0.0.1", True),
        (AddressPolicy.of(False, ["127.0.0.1/32"]), "::ffff:127.0.0.1", True),
        (AddressPolicy.of(False, ["127.0.0.1/32"]), "127.0.0.2", False),
        (AddressPolicy.of(False, ["10.0.0.0/8"]), "10.200.1.1", True),
        (AddressPolicy.of(True, []), "192.168.1.1", True),
        (AddressPolicy.of(True, []), "::1", True),
        (AddressPolicy.of(True, []), "0.0.0.0", False),  # never: unspecified and multicast
        (AddressPolicy.of(True, []), "224.0.0.1", False),
    ],
)
def test_the_operator_may_allow_networks(policy: AddressPolicy, address: str, allowed: bool) -> None:
    assert (policy.refusal(address) == "") is allowed


def test_a_host_with_one_refused_address_among_public_ones_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"resolves to 10\.0\.0\.1, a private address") as refused:
        AddressPolicy().check("mixed.example", ["93.184.216.34", "10.0.0.1"])
    assert refused.value.field == "url"
    assert AddressPolicy().check("ok.example", ["93.184.216.34"]) == "93.184.216.34"
    with pytest.raises(InvalidArgument, match="no address"):
        AddressPolicy().check("none.example", [])


def test_a_bad_allowed_network_is_named() -> None:
    with pytest.raises(InvalidArgument, match=r"allowed_networks\[1\]"):
        AddressPolicy.of(False, ["10.0.0.0/8", "not-a-net"])


# -------------------------------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("event_types", "subjects", "field"),
    [
        (["created", "nope"], [], "event_types[1]"),
        (["created"] * 65, [], "event_types"),
        ([], ["s"] * 65, "subjects"),
        ([], ["ok", ""], "subjects[1]"),
        ([], ["x" * 257], "subjects[0]"),
    ],
)
def test_bad_filters_name_the_field(event_types: list[str], subjects: list[str], field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_filters(event_types, subjects, 64)
    assert refused.value.field == field


def test_filters_taken() -> None:
    filters = parse_filters(["created", "deleted"], ["ana"], 64)
    assert filters.event_types == {EventType.CREATED, EventType.DELETED} and filters.subjects == {"ana"}
