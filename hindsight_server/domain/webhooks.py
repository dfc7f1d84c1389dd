"""Webhooks: the change feed pushed to HTTP endpoints, per the Standard Webhooks specification
(https://www.standardwebhooks.com). Pure: the signature, the body, the retry schedule, the URL and address
policy, the filters' bounds. The I/O is elsewhere (outbound/webhook_http.py sends, store/webhooks.py keeps
the endpoints, pipelines/webhooks.py delivers).

A delivery is `POST <url>` with the headers `webhook-id` (the event's stable id: a redelivery carries the
same), `webhook-timestamp` (unix seconds of this attempt) and `webhook-signature`: `v1,<base64 of
HMAC-SHA256(key, "{id}.{timestamp}.{body}")>` for each secret in force, space-separated. A secret is
`whsec_<base64 of the key>`. During a rotation the new secret and the previous one both sign until the
previous one expires, so a receiver may switch at any moment of that window.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.feed import ChangeEvent, Cursor, EventType, parse_event_types

__all__ = [
    "SECRET_PREFIX",
    "AddressPolicy",
    "DeliveryOutcome",
    "Endpoint",
    "EndpointFilters",
    "EndpointState",
    "Failure",
    "Lease",
    "RetryPolicy",
    "Secrets",
    "WebhookUrl",
    "after_failure",
    "event_body",
    "format_secret",
    "parse_filters",
    "parse_url",
    "retry_delay_s",
    "sign",
    "signature_header",
]

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the HMAC key: 256 bits, SHA-256's block-size class
MAX_SUBJECT_CHARS = 256


class EndpointState(StrEnum):
    ACTIVE = "active"  # delivering (or waiting for its next attempt)
    DEAD = "dead"  # gave up after the retry policy's attempts or age; Replay revives it


# ------------------------------------------------------------------------------------------ signing


def format_secret(key: bytes) -> str:
    """A secret as the receiver configures it: whsec_<base64>."""
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` signature of the Standard Webhooks scheme."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets: Sequence[str], message_id: str, timestamp: int, body: bytes) -> str:
    """The webhook-signature header: a signature per secret in force, space-separated."""
    return " ".join(sign(secret, message_id, timestamp, body) for secret in secrets)


def event_body(event: ChangeEvent, max_bytes: int) -> bytes:
    """The JSON a delivery carries: the event as Watch streams it. `content` only when the event has it
    (the tenant's feed carries content: feed.content_tenants) and the body stays within `max_bytes`;
    when it would not, the content is left out and `content_omitted` is true (read it with Get)."""
    document: dict[str, object] = {
        "type": event.type.value,
        "id": event.id,
        "cursor": str(event.cursor),
        "at": event.at.isoformat(),
        "memory_id": event.memory_id,
        "subject": event.subject,
        "kind": event.kind,
        "resolution": event.resolution,
        "version": event.version,
        "fields": list(event.fields),
    }
    # What only some types carry (a consolidated session, a finished erasure, a served recall).
    extra = {
        "session_id": event.session_id,
        "erasure_id": event.erasure_id,
        "memory_ids": list(event.memory_ids),
        "packed_ids": list(event.packed_ids),
    }
    document.update({name: value for name, value in extra.items() if value})
    if event.content is not None:
        body = _json({**document, "content": event.content})
        if len(body) <= max_bytes:
            return body
        document["content_omitted"] = True
    return _json(document)


def _json(document: dict[str, object]) -> bytes:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------------------ retries


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter (a random delay in [0, min(cap, base * 2^(n-1)))): failing
    endpoints spread out instead of retrying in step. An event that failed `max_attempts` times, or kept
    failing for `max_age`, makes its endpoint dead."""

    base_s: float = 1.0
    cap_s: float = 600.0
    max_attempts: int = 15
    max_age: timedelta = timedelta(hours=24)


def retry_delay_s(policy: RetryPolicy, attempts: int, unit_random: float) -> float:
    """The wait before the next attempt after `attempts` failed ones (>= 1); `unit_random` in [0, 1)."""
    ceiling = min(policy.cap_s, policy.base_s * float(2 ** min(attempts - 1, 62)))
    return unit_random * ceiling


@dataclass(frozen=True, slots=True)
class Failure:
    """What one failed attempt leaves on the endpoint: its count, the next attempt's time, or dead."""

    attempts: int
    failing_since: datetime
    next_attempt_at: datetime
    dead: bool


def after_failure(
    policy: RetryPolicy,
    attempts_before: int,
    failing_since: datetime | None,
    now: datetime,
    unit_random: float,
) -> Failure:
    attempts = attempts_before + 1
    since = failing_since or now
    dead = attempts >= policy.max_attempts or now - since >= policy.max_age
    delay = timedelta(seconds=retry_delay_s(policy, attempts, unit_random))
    return Failure(attempts, since, now + delay, dead)


# ------------------------------------------------------------------------------------ URL, addresses


@dataclass(frozen=True, slots=True)
class WebhookUrl:
    text: str  # as registered
    scheme: str  # http or https
    host: str  # a name or an address, without brackets
    port: int
    target: str  # path and query: what the request line carries

    def with_address(self, address: str) -> str:
        """The URL with its host replaced by the checked address: what is connected to (the Host header
        and TLS's server name still carry the host)."""
        shown = f"[{address}]" if ":" in address else address
        return f"{self.scheme}://{shown}:{self.port}{self.target}"

    @property
    def host_header(self) -> str:
        default = {"http": 80, "https": 443}[self.scheme]
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port == default else f"{shown}:{self.port}"


_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$)({_LABEL}\.)*{_LABEL}")


def parse_url(text: str, max_chars: int, field: str = "url") -> WebhookUrl:
    """An endpoint's URL: http(s), a host, no credentials, no fragment, at most `max_chars`."""
    if not text:
        raise InvalidArgument(field, "is required: the endpoint's http(s) URL")
    if len(text) > max_chars:
        raise InvalidArgument(field, f"is {len(text)} characters; at most {max_chars}")
    if any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in text):
        raise InvalidArgument(field, "may hold only printable ASCII (percent-encode the rest), no spaces")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidArgument(field, f"is not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InvalidArgument(field, f"scheme {scheme[:16]!r}: only http and https are delivered to")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidArgument(field, "must not carry credentials (user:password@); verify the signature")
    if parts.fragment or text.endswith("#"):
        raise InvalidArgument(field, "must not have a fragment (#...)")
    host = (parts.hostname or "").lower()
    if not host:
        raise InvalidArgument(field, "has no host")
    if not _is_address(host) and not _HOST_NAME.fullmatch(host):
        raise InvalidArgument(field, f"host {host[:64]!r} is neither a host name nor an IP address")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return WebhookUrl(text, scheme, host, port or {"http": 80, "https": 443}[scheme], target)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _refusal(address: Address) -> str:
    """Why an address is not one to deliver to (empty: it is public)."""
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:  # shared address space (100.64/10), documentation ranges, ...
        return "not globally routable"
    return ""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which addresses deliveries may connect to: public ones only (no loopback, private, link-local,
    multicast, unspecified or reserved address, IPv4 or IPv6, an IPv4-mapped IPv6 address judged as its
    IPv4 one), unless the operator allows private networks or lists networks allowed."""

    allow_private_networks: bool = False
    allowed_networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, allow_private_networks: bool, allowed_cidrs: Sequence[str]) -> AddressPolicy:
        networks = []
        for index, cidr in enumerate(allowed_cidrs):
            try:
                networks.append(ipaddress.ip_network(cidr, strict=False))
            except ValueError as exc:
                raise InvalidArgument(f"webhooks.allowed_networks[{index}]", str(exc)) from None
        return cls(allow_private_networks, tuple(networks))

    def refusal(self, text: str) -> str:
        """Why `text` (an IP address) may not be connected to; empty when it may."""
        address: Address = ipaddress.ip_address(text)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.allowed_networks):
            return ""
        why = _refusal(address)
        if why and self.allow_private_networks and why not in ("unspecified", "multicast"):
            return ""
        return why

    def check(self, host: str, addresses: Sequence[str], field: str = "url") -> str:
        """The address to connect to: the first the host resolved to, when every one of them is allowed
        (a name that resolves to a private address among public ones is refused: which one a connection
        would take is not ours to choose)."""
        if not addresses:
            raise InvalidArgument(field, f"host {host[:64]!r} resolves to no address")
        for address in addresses:
            why = self.refusal(address)
            if why:
                raise InvalidArgument(
                    field,
                    f"host {host[:64]!r} resolves to {address}, a {why} address: webhooks are delivered "
                    "to public addresses only (webhooks.allow_private_networks, webhooks.allowed_networks)",
                )
        return addresses[0]


# ------------------------------------------------------------------------------------------ filters


@dataclass(frozen=True, slots=True)
class EndpointFilters:
    event_types: frozenset[EventType] = frozenset()  # empty: every type
    subjects: frozenset[str] = frozenset()  # empty: every subject


def delivered_types(filters: EndpointFilters) -> frozenset[EventType]:
    """The event types an endpoint is sent: those it named, or every type but `recall.served` (one
    event per recall of an audited tenant: a receiver asks for it by name)."""
    return filters.event_types or frozenset(EventType) - {EventType.RECALL_SERVED}


def parse_filters(event_types: Sequence[str], subjects: Sequence[str], max_items: int) -> EndpointFilters:
    """The endpoint's filters, each list at most `max_items` long, every subject at most 256 chars."""
    if len(event_types) > max_items:
        raise InvalidArgument("event_types", f"{len(event_types)} given; at most {max_items}")
    if len(subjects) > max_items:
        raise InvalidArgument("subjects", f"{len(subjects)} given; at most {max_items}")
    for index, subject in enumerate(subjects):
        if not subject or len(subject) > MAX_SUBJECT_CHARS:
            raise InvalidArgument(f"subjects[{index}]", f"must be 1 to {MAX_SUBJECT_CHARS} characters")
    return EndpointFilters(parse_event_types(list(event_types)), frozenset(subjects))


# -------------------------------------------------------------------------------------------- record


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    tenant_id: str
    url: str
    filters: EndpointFilters
    viewer: str | None  # registered by an agent-bound key: that agent's view of the feed
    state: EndpointState
    cursor: Cursor  # delivered up to here
    attempts: int  # failed attempts of the event at the cursor
    failing_since: datetime | None
    next_attempt_at: datetime
    last_error: str
    delivered: int
    created_at: datetime
    dead_at: datetime | None
    previous_secret_until: datetime | None  # a rotation's previous secret signs until then


@dataclass(frozen=True, slots=True)
class Secrets:
    current: str
    previous: str | None  # signs too while the database's now() is before previous_until
    previous_until: datetime | None

    def in_force(self, now: datetime) -> list[str]:
        if self.previous and self.previous_until is not None and now < self.previous_until:
            return [self.current, self.previous]
        return [self.current]


@dataclass(frozen=True, slots=True)
class Lease:
    endpoint: Endpoint
    secrets: Secrets


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """One attempt's answer."""

    status: int  # the HTTP status; 0 when there was no answer
    error: str  # why the attempt failed, for the endpoint's last_error; empty when it succeeded

    @property
    def delivered(self) -> bool:
        return 200 <= self.status < 300
