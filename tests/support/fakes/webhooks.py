"""In-memory webhook endpoints behind WebhookEndpoints and WebhookLeases (pipelines/ports.py), with the
fencing of store/webhooks.py (a change applies only under the holder's lease at the cursor it delivered
from), and a receiver behind WebhookPoster that resolves names from a table, checks the addresses with the
real AddressPolicy and answers each delivery with the next status it was given."""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.feed import Cursor
from hindsight_server.domain.webhooks import (
    AddressPolicy,
    DeliveryOutcome,
    Endpoint,
    EndpointFilters,
    EndpointState,
    Failure,
    Lease,
    Secrets,
    WebhookUrl,
)

NEVER = datetime.min.replace(tzinfo=UTC)  # the SQL's '-infinity': a lease given back


@dataclass
class _Row:
    endpoint: Endpoint
    secrets: Secrets
    holder: str = ""
    lease_until: datetime = NEVER


@dataclass
class InMemoryWebhookStore:
    clock: Clock  # the database's now(), which times the leases
    rows: dict[str, _Row] = field(default_factory=dict)  # by endpoint id

    def _of(self, tenant_id: str, endpoint_id: str) -> _Row | None:
        row = self.rows.get(endpoint_id)
        return row if row is not None and row.endpoint.tenant_id == tenant_id else None

    def _change(self, row: _Row, **changes: Any) -> Endpoint:
        row.endpoint = replace(row.endpoint, **changes)
        return row.endpoint

    def _fenced(self, endpoint_id: str, holder: str, cursor: Cursor | None = None) -> _Row | None:
        row = self.rows.get(endpoint_id)
        if row is None or row.holder != holder or (cursor is not None and row.endpoint.cursor != cursor):
            return None
        return row

    # WebhookEndpoints

    async def add(
        self,
        tenant_id: str,
        url: str,
        filters: EndpointFilters,
        viewer: str | None,
        secret: str,
        cursor: Cursor,
        now: datetime,
        max_per_tenant: int,
    ) -> Endpoint | None:
        if len(await self.endpoints(tenant_id)) >= max_per_tenant:
            return None
        endpoint = Endpoint(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            url=url,
            filters=filters,
            viewer=viewer,
            state=EndpointState.ACTIVE,
            cursor=cursor,
            attempts=0,
            failing_since=None,
            next_attempt_at=now,
            last_error="",
            delivered=0,
            created_at=now,
            dead_at=None,
            previous_secret_until=None,
        )
        self.rows[endpoint.id] = _Row(endpoint, Secrets(secret, None, None))
        return endpoint

    async def endpoints(self, tenant_id: str) -> list[Endpoint]:
        mine = [row.endpoint for row in self.rows.values() if row.endpoint.tenant_id == tenant_id]
        return sorted(mine, key=lambda e: (e.created_at, e.id))

    async def get(self, tenant_id: str, endpoint_id: str) -> Endpoint | None:
        row = self._of(tenant_id, endpoint_id)
        return None if row is None else row.endpoint

    async def remove(self, tenant_id: str, endpoint_id: str) -> bool:
        if self._of(tenant_id, endpoint_id) is None:
            return False
        del self.rows[endpoint_id]
        return True

    async def rotate(
        self, tenant_id: str, endpoint_id: str, secret: str, previous_until: datetime
    ) -> Endpoint | None:
        row = self._of(tenant_id, endpoint_id)
        if row is None:
            return None
        row.secrets = Secrets(secret, row.secrets.current, previous_until)
        return self._change(row, previous_secret_until=previous_until)

    async def replay(
        self, tenant_id: str, endpoint_id: str, cursor: Cursor, now: datetime
    ) -> Endpoint | None:
        row = self._of(tenant_id, endpoint_id)
        if row is None:
            return None
        return self._change(
            row,
            state=EndpointState.ACTIVE,
            cursor=cursor,
            attempts=0,
            failing_since=None,
            next_attempt_at=now,
            dead_at=None,
            last_error="",
        )

    # WebhookLeases

    async def claim(self, holder: str, lease_s: float, now: datetime, limit: int) -> list[Lease]:
        due = sorted(
            (
                row
                for row in self.rows.values()
                if row.endpoint.state is EndpointState.ACTIVE
                and row.endpoint.next_attempt_at <= now
                and row.lease_until < self.clock()
            ),
            key=lambda row: row.endpoint.next_attempt_at,
        )[:limit]
        for row in due:
            row.holder, row.lease_until = holder, self.clock() + timedelta(seconds=lease_s)
        return [Lease(row.endpoint, row.secrets) for row in due]

    async def renew(self, endpoint_id: str, holder: str, lease_s: float, cursor: Cursor) -> Secrets | None:
        row = self._fenced(endpoint_id, holder, cursor)
        if row is None or row.lease_until <= self.clock() or row.endpoint.state is not EndpointState.ACTIVE:
            return None
        row.lease_until = self.clock() + timedelta(seconds=lease_s)
        return row.secrets

    async def advance(
        self, endpoint_id: str, holder: str, expected: Cursor, cursor: Cursor, delivered: int
    ) -> bool:
        row = self._fenced(endpoint_id, holder, expected)
        if row is None:
            return False
        self._change(
            row,
            cursor=cursor,
            attempts=0,
            failing_since=None,
            last_error="",
            delivered=row.endpoint.delivered + delivered,
        )
        return True

    async def failed(
        self, endpoint_id: str, holder: str, cursor: Cursor, failure: Failure, error: str
    ) -> None:
        row = self._fenced(endpoint_id, holder, cursor)
        if row is None:
            return
        self._change(
            row,
            attempts=failure.attempts,
            failing_since=failure.failing_since,
            next_attempt_at=failure.next_attempt_at,
            last_error=error,
            state=EndpointState.DEAD if failure.dead else EndpointState.ACTIVE,
            dead_at=self.clock() if failure.dead else None,
        )
        row.holder, row.lease_until = "", NEVER

    async def release(self, endpoint_id: str, holder: str, next_attempt_at: datetime) -> None:
        row = self._fenced(endpoint_id, holder)
        if row is not None:
            self._change(row, next_attempt_at=next_attempt_at)
            row.holder, row.lease_until = "", NEVER


@dataclass(frozen=True, slots=True)
class Delivery:
    url: str
    headers: Mapping[str, str]
    body: bytes


@dataclass
class FakeReceiver:
    """Resolves host names by `hosts` (an address literal resolves to itself) under `policy`, and answers
    each POST with the next of `statuses` (200 once they run out; 0: no answer)."""

    hosts: dict[str, list[str]] = field(default_factory=lambda: {"hooks.example.com": ["93.184.216.34"]})
    policy: AddressPolicy = field(default_factory=AddressPolicy)
    statuses: list[int] = field(default_factory=list)
    received: list[Delivery] = field(default_factory=list)  # the deliveries answered 2xx, in order

    async def resolve(self, url: WebhookUrl, field: str = "url") -> str:
        addresses = self.hosts.get(url.host) or ([url.host] if _is_address(url.host) else [])
        if not addresses:
            raise InvalidArgument(field, f"host {url.host[:64]!r} does not resolve")
        return self.policy.check(url.host, addresses, field)

    async def post(self, url: WebhookUrl, headers: Mapping[str, str], body: bytes) -> DeliveryOutcome:
        try:
            await self.resolve(url)
        except InvalidArgument as exc:
            return DeliveryOutcome(0, exc.reason)
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 0:
            return DeliveryOutcome(0, "no answer within 5 s")
        if not 200 <= status < 300:
            return DeliveryOutcome(status, f"answered HTTP {status}")
        self.received.append(Delivery(url.text, dict(headers), body))
        return DeliveryOutcome(status, "")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
