"""Webhooks: endpoints registered per tenant (WebhookRegistry, behind the Webhooks RPCs), and the
delivery that runs on every memory server (WebhookDispatcher).

Delivery is at least once and in order per endpoint. A server leases an endpoint (store/webhooks.py),
reads its events after the endpoint's cursor with FeedStore.read (the feed's order: none missed, none
twice) filtered as the endpoint asks, and POSTs them one at a time: the next only after the previous
was answered 2xx and the cursor moved past it. A failed attempt (no answer in time, a refused or broken
connection, any other status) schedules the next one after an exponential backoff with full jitter and
gives the lease back; after the retry policy's attempts or age the endpoint is dead until Replay. The
lease is renewed before each attempt for longer than an attempt may take, so an attempt never outlives
the lease it runs under; a server killed mid-attempt loses its leases at their expiry, and another
server sends the event again, with the same webhook-id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import HindsightError, InvalidArgument, NotFound, ResourceExhausted
from hindsight_server.domain.feed import OLDEST, Cursor, FeedQuery, parse_cursor
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.domain.webhooks import (
    SECRET_BYTES,
    Endpoint,
    Failure,
    Lease,
    RetryPolicy,
    after_failure,
    delivered_types,
    event_body,
    format_secret,
    parse_filters,
    parse_url,
    signature_header,
)
from hindsight_server.pipelines.feed import FeedPipeline
from hindsight_server.pipelines.ports import FeedReader, WebhookEndpoints, WebhookLeases, WebhookPoster

__all__ = ["WebhookDispatcher", "WebhookRegistry", "WebhookSettings"]

log = logging.getLogger(__name__)

_ENDPOINT_ID_CHARS = 36  # a UUID's text


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    max_endpoints_per_tenant: int = 20
    max_url_chars: int = 2_048
    max_filter_items: int = 64
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rotation_overlap: timedelta = timedelta(hours=24)
    max_body_bytes: int = 256 * 1024
    lease_s: float = 30.0
    poll_s: float = 1.0
    max_concurrent: int = 32
    rate_per_s: float = 20.0
    burst: int = 20
    batch_size: int = 100


def _endpoint_id(text: str) -> str:
    if not text or len(text) > _ENDPOINT_ID_CHARS:
        raise InvalidArgument(
            "endpoint_id", "is required: an endpoint's id from AddEndpoint or ListEndpoints"
        )
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise InvalidArgument("endpoint_id", f"{text!r} is not an endpoint id") from None


class WebhookRegistry:
    """What the Webhooks RPCs do: every input bounded and checked, the URL's host resolved and its
    addresses checked against the policy before anything is stored."""

    def __init__(
        self,
        store: WebhookEndpoints,
        feed: FeedPipeline,
        feed_store: FeedReader,
        sender: WebhookPoster,
        settings: WebhookSettings,
        clock: Clock,
        new_key: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self._store = store
        self._feed = feed
        self._feed_store = feed_store
        self._sender = sender
        self._settings = settings
        self._clock = clock
        self._new_key = new_key

    def _secret(self) -> str:
        return format_secret(self._new_key(SECRET_BYTES))

    async def add(
        self,
        tenant_id: str,
        url: str,
        event_types: list[str],
        subjects: list[str],
        viewer: str | None,
    ) -> tuple[Endpoint, str]:
        """A new endpoint that receives the events from now on, and its secret (shown this once)."""
        settings = self._settings
        parsed = parse_url(url, settings.max_url_chars)
        filters = parse_filters(event_types, subjects, settings.max_filter_items)
        await self._sender.resolve(parsed)
        secret = self._secret()
        endpoint = await self._store.add(
            tenant_id,
            parsed.text,
            filters,
            viewer,
            secret,
            await self._feed_store.horizon(),
            self._clock(),
            settings.max_endpoints_per_tenant,
        )
        if endpoint is None:
            raise ResourceExhausted(
                f"tenant {tenant_id!r} has {settings.max_endpoints_per_tenant} webhook endpoints already "
                "(webhooks.max_endpoints_per_tenant); remove one first"
            )
        return endpoint, secret

    async def endpoints(self, tenant_id: str) -> list[Endpoint]:
        return await self._store.endpoints(tenant_id)

    async def remove(self, tenant_id: str, endpoint_id: str) -> None:
        if not await self._store.remove(tenant_id, _endpoint_id(endpoint_id)):
            raise NotFound("webhook endpoint", endpoint_id)

    async def rotate(self, tenant_id: str, endpoint_id: str) -> tuple[Endpoint, str]:
        """A new secret signs from the next attempt on; the previous one signs beside it for the
        rotation overlap."""
        secret = self._secret()
        until = self._clock() + self._settings.rotation_overlap
        endpoint = await self._store.rotate(tenant_id, _endpoint_id(endpoint_id), secret, until)
        if endpoint is None:
            raise NotFound("webhook endpoint", endpoint_id)
        return endpoint, secret

    async def replay(self, tenant_id: str, endpoint_id: str, cursor: str) -> Endpoint:
        """Delivers again from `cursor` ("oldest", a cursor the feed gave, or "" for now), reviving a
        dead endpoint; OUT_OF_RANGE for a cursor older than the feed keeps."""
        ident = _endpoint_id(endpoint_id)
        if await self._store.get(tenant_id, ident) is None:
            raise NotFound("webhook endpoint", endpoint_id)
        oldest = cursor == OLDEST
        query = FeedQuery(tenant_id, None if oldest else parse_cursor(cursor), oldest=oldest)
        start = await self._feed.start(query)
        endpoint = await self._store.replay(tenant_id, ident, start, self._clock())
        if endpoint is None:
            raise NotFound("webhook endpoint", endpoint_id)
        return endpoint


class WebhookDispatcher:
    """On every server: every `poll_s`, leases the due endpoints (up to the free delivery slots) and
    delivers to each in a task of its own; one endpoint's failure, or a bug it hits, touches no other."""

    def __init__(
        self,
        store: WebhookLeases,
        feed_store: FeedReader,
        sender: WebhookPoster,
        settings: WebhookSettings,
        clock: Clock,
        holder: str,
        unit_random: Callable[[], float] = random.random,
    ) -> None:
        self._store = store
        self._feed_store = feed_store
        self._sender = sender
        self._settings = settings
        self._clock = clock
        self._holder = holder  # the lease holder's name: this server
        self._random = unit_random
        self._limiter = RateLimiter(settings.rate_per_s, settings.burst)
        self._deliveries: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    await self.tick()
                except HindsightError as exc:
                    log.warning("webhooks: no endpoint claimed: %s", exc)
                except Exception:
                    log.exception("webhooks: claiming failed; retrying in %.1fs", self._settings.poll_s)
                self._slot_freed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.poll_s):
                        await self._slot_freed.wait()
        finally:
            for task in self._deliveries:
                task.cancel()
            await asyncio.gather(*self._deliveries, return_exceptions=True)

    async def tick(self) -> int:
        """Leases what is due and starts delivering to it; how many endpoints it took."""
        free = self._settings.max_concurrent - len(self._deliveries)
        if free <= 0:
            return 0
        leases = await self._store.claim(self._holder, self._settings.lease_s, self._clock(), free)
        for lease in leases:
            task = asyncio.create_task(self._run(lease), name=f"webhook-{lease.endpoint.id}")
            self._deliveries.add(task)
            task.add_done_callback(self._finished)
        return len(leases)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._deliveries.discard(task)
        self._slot_freed.set()

    async def _run(self, lease: Lease) -> None:
        endpoint = lease.endpoint
        try:
            await self.deliver(lease)
        except asyncio.CancelledError:
            # The server stops: the lease goes back now rather than at its expiry (an event sent but
            # not yet recorded is sent again by whoever takes the endpoint).
            with contextlib.suppress(HindsightError):
                await self._store.release(endpoint.id, self._holder, self._clock())
            raise
        except Exception as exc:
            if isinstance(exc, HindsightError):  # the database away: the lease expires if not given back
                log.warning("webhooks: delivering to endpoint %s stopped: %s", endpoint.id, exc)
            else:
                log.exception("webhooks: delivering to endpoint %s failed", endpoint.id)
            with contextlib.suppress(HindsightError):
                await self._store.release(endpoint.id, self._holder, self._later(self._settings.poll_s))

    def _later(self, seconds: float) -> datetime:
        return self._clock() + timedelta(seconds=seconds)

    async def deliver(self, lease: Lease) -> None:
        """One batch of the endpoint's events, in order, then the lease back."""
        endpoint, settings = lease.endpoint, self._settings
        query = FeedQuery(
            endpoint.tenant_id,
            endpoint.cursor,
            subjects=endpoint.filters.subjects,
            types=delivered_types(endpoint.filters),
            viewer=endpoint.viewer,
        )
        cursor = endpoint.cursor
        trimmed = await self._feed_store.trimmed(endpoint.tenant_id)
        if trimmed is not None and cursor < trimmed:
            # Events after the cursor were dropped by the feed's retention: delivering on would skip
            # them unseen. Dead, it waits for a Replay that says where to go on from.
            now = self._clock()
            lost = Failure(endpoint.attempts, endpoint.failing_since or now, now, dead=True)
            reason = f"events after cursor {cursor} passed the feed's retention; replay from 'oldest'"
            await self._store.failed(endpoint.id, self._holder, cursor, lost, reason)
            log.warning("webhooks: endpoint %s is dead: %s", endpoint.id, reason)
            return
        events, position = await self._feed_store.read(query, cursor, settings.batch_size)
        for event in events:
            if not self._limiter.allow(endpoint.id, asyncio.get_running_loop().time()):
                await self._settle(endpoint, cursor, cursor, self._limiter.wait_s(endpoint.id))
                return
            secrets_now = await self._store.renew(endpoint.id, self._holder, settings.lease_s, cursor)
            if secrets_now is None:
                return  # the lease expired and was taken, or a Replay moved the cursor: not ours now
            now = self._clock()
            stamp = int(now.timestamp())
            body = event_body(event, settings.max_body_bytes)
            headers = {
                "webhook-id": event.id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": signature_header(secrets_now.in_force(now), event.id, stamp, body),
            }
            outcome = await self._sender.post(parse_url(endpoint.url, len(endpoint.url)), headers, body)
            if not outcome.delivered:
                failure = after_failure(
                    settings.retry, endpoint.attempts, endpoint.failing_since, self._clock(), self._random()
                )
                await self._store.failed(endpoint.id, self._holder, cursor, failure, outcome.error)
                if failure.dead:
                    log.warning(
                        "webhooks: endpoint %s is dead after %d attempts: %s",
                        endpoint.id,
                        failure.attempts,
                        outcome.error,
                    )
                return
            if not await self._store.advance(endpoint.id, self._holder, cursor, event.cursor, 1):
                return
            cursor = event.cursor
            endpoint = _cleared(endpoint)
        full = len(events) >= settings.batch_size
        await self._settle(endpoint, cursor, position, 0.0 if full else settings.poll_s)

    async def _settle(self, endpoint: Endpoint, cursor: Cursor, position: Cursor, wait_s: float) -> None:
        """The cursor moves to `position` (past events that matched no filter, too: nothing was sent
        for them), the lease goes back, and the endpoint is looked at again in `wait_s`."""
        if position > cursor and not await self._store.advance(
            endpoint.id, self._holder, cursor, position, 0
        ):
            return
        await self._store.release(endpoint.id, self._holder, self._later(wait_s))


def _cleared(endpoint: Endpoint) -> Endpoint:
    """The endpoint after a delivery: no failed attempt pending."""
    return replace(endpoint, attempts=0, failing_since=None)
