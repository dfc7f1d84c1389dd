"""Webhooks on the fakes (tests/support/fakes): registering endpoints (bounded and checked input, the
address policy, secrets and their rotation, replays) and delivering the feed to them: in order, signed,
filtered, retried after a failure with backoff until dead, stopped by the feed's retention or the rate
limit, and fenced by the lease. The SQL and HTTP behind the same calls run in tests/rpc/test_webhooks.py
and tests/outbound."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted
from hindsight_server.domain.feed import MAX_SEQ, START, Cursor, EventType, NewEvent
from hindsight_server.domain.webhooks import Endpoint, EndpointState, RetryPolicy, format_secret, sign
from hindsight_server.pipelines.feed import FeedPipeline, FeedSettings
from hindsight_server.pipelines.webhooks import WebhookDispatcher, WebhookRegistry, WebhookSettings
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.feed_log import InMemoryFeedLog
from tests.support.fakes.webhooks import FakeReceiver, InMemoryWebhookStore

NOW = datetime(2024, 5, 10, 12, tzinfo=UTC)
URL = "https://hooks.example.com/hindsight"
HOLDER = "server-a"


@dataclass
class Hooks:
    registry: WebhookRegistry
    dispatcher: WebhookDispatcher
    store: InMemoryWebhookStore
    log: InMemoryFeedLog
    receiver: FakeReceiver
    clock: FakeClock
    settings: WebhookSettings

    async def deliver_once(self) -> int:
        """Claims what is due and delivers one batch to each; how many endpoints it claimed."""
        leases = await self.store.claim(HOLDER, self.settings.lease_s, self.clock(), 10)
        for lease in leases:
            await self.dispatcher.deliver(lease)
        return len(leases)

    async def endpoint(self, endpoint_id: str) -> Endpoint:
        endpoint = await self.store.get("acme", endpoint_id)
        assert endpoint is not None
        return endpoint


def hooks(receiver: FakeReceiver | None = None, **settings: Any) -> Hooks:
    clock, log, receiver = FakeClock(NOW), InMemoryFeedLog(), receiver or FakeReceiver()
    store = InMemoryWebhookStore(clock)
    chosen = WebhookSettings(**settings)
    feed = FeedPipeline(log, FeedSettings())
    keys = iter(bytes([n]) * 32 for n in range(1, 100))
    registry = WebhookRegistry(store, feed, log, receiver, chosen, clock, new_key=lambda size: next(keys))
    dispatcher = WebhookDispatcher(store, log, receiver, chosen, clock, HOLDER, unit_random=lambda: 0.5)
    return Hooks(registry, dispatcher, store, log, receiver, clock, chosen)


def created(memory_id: str, **fields: Any) -> NewEvent:
    return NewEvent("acme", fields.pop("type", EventType.CREATED), NOW, memory_id, **fields)


def delivered_ids(h: Hooks) -> list[str]:
    return [json.loads(d.body)["memory_id"] for d in h.receiver.received]


async def test_an_endpoint_receives_the_events_after_its_registration_in_order_and_signed() -> None:
    h = hooks()
    h.log.record([created("before")])
    endpoint, secret = await h.registry.add("acme", URL, [], [], None)
    assert secret == format_secret(bytes([1]) * 32) and endpoint.cursor == Cursor(1, MAX_SEQ)
    events = h.log.record([created("m1"), created("m2", content="lives in Lisbon")])
    assert await h.deliver_once() == 1
    assert delivered_ids(h) == ["m1", "m2"]
    first = h.receiver.received[0]
    stamp = int(NOW.timestamp())
    assert first.headers == {
        "webhook-id": events[0].id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(secret, events[0].id, stamp, first.body),
    }
    after = await h.endpoint(endpoint.id)
    assert after.cursor == Cursor(events[1].cursor.xid, MAX_SEQ)  # the horizon: every event below it seen
    assert after.delivered == 2 and after.attempts == 0
    assert after.next_attempt_at == NOW + timedelta(seconds=h.settings.poll_s)  # caught up: polls again


@pytest.mark.parametrize(
    ("event_types", "subjects", "seen"),
    [
        ([], [], ["m1", "m2"]),  # every type but recall.served
        (["deleted"], [], ["m2"]),
        ([], ["user-8"], ["m2"]),
        (["recall.served"], [], ["recall"]),  # only by name
    ],
)
async def test_an_endpoint_is_sent_the_events_its_filters_let_through(
    event_types: list[str], subjects: list[str], seen: list[str]
) -> None:
    h = hooks()
    endpoint, _ = await h.registry.add("acme", URL, event_types, subjects, None)
    last = h.log.record(
        [
            created("m1", subject="user-7"),
            created("m2", subject="user-8", type=EventType.DELETED),
            created("recall", type=EventType.RECALL_SERVED),
        ]
    )[-1]
    await h.deliver_once()
    assert delivered_ids(h) == seen
    assert (await h.endpoint(endpoint.id)).cursor >= last.cursor  # past what was not sent, too


async def test_a_failed_attempt_backs_off_and_the_event_is_sent_again_once_due() -> None:
    h = hooks(FakeReceiver(statuses=[500]), retry=RetryPolicy(base_s=10.0))
    endpoint, _ = await h.registry.add("acme", URL, [], [], None)
    h.log.record([created("m1")])
    await h.deliver_once()
    failing = await h.endpoint(endpoint.id)
    assert (failing.attempts, failing.last_error, failing.cursor) == (1, "answered HTTP 500", endpoint.cursor)
    assert failing.next_attempt_at == NOW + timedelta(seconds=5)  # half (the jitter) of 10 s
    assert await h.deliver_once() == 0  # not due yet
    h.clock.advance(timedelta(seconds=5))
    assert await h.deliver_once() == 1
    assert delivered_ids(h) == ["m1"] and (await h.endpoint(endpoint.id)).attempts == 0


async def test_an_endpoint_that_keeps_failing_is_dead_until_replayed() -> None:
    h = hooks(FakeReceiver(statuses=[0, 503, 503]), retry=RetryPolicy(max_attempts=3))
    endpoint, _ = await h.registry.add("acme", URL, [], [], None)
    h.log.record([created("m1")])
    for _ in range(3):
        h.clock.advance(timedelta(minutes=10))
        assert await h.deliver_once() == 1
    dead = await h.endpoint(endpoint.id)
    assert dead.state is EndpointState.DEAD and dead.dead_at == h.clock() and dead.attempts == 3
    h.clock.advance(timedelta(hours=1))
    assert await h.deliver_once() == 0
    revived = await h.registry.replay("acme", endpoint.id, str(endpoint.cursor))
    assert revived.state is EndpointState.ACTIVE and revived.attempts == 0 and revived.last_error == ""
    assert await h.deliver_once() == 1 and delivered_ids(h) == ["m1"]


async def test_an_endpoint_behind_the_feeds_retention_is_dead_instead_of_skipping_events() -> None:
    h = hooks()
    endpoint, _ = await h.registry.add("acme", URL, [], [], None)
    h.log.trimmed_to["acme"] = Cursor(9, 1)
    await h.deliver_once()
    dead = await h.endpoint(endpoint.id)
    assert dead.state is EndpointState.DEAD and h.receiver.received == []
    assert (
        dead.last_error
        == f"events after cursor {endpoint.cursor} passed the feed's retention; replay from 'oldest'"
    )
    with pytest.raises(OutOfRange):
        await h.registry.replay("acme", endpoint.id, str(endpoint.cursor))
    assert (await h.registry.replay("acme", endpoint.id, "oldest")).cursor == Cursor(9, 1)


async def test_deliveries_past_the_rate_wait_for_the_limiter() -> None:
    h = hooks(rate_per_s=1.0, burst=2)
    endpoint, _ = await h.registry.add("acme", URL, [], [], None)
    events = h.log.record([created(f"m{n}") for n in range(4)])
    await h.deliver_once()
    assert delivered_ids(h) == ["m0", "m1"]
    held = await h.endpoint(endpoint.id)
    assert held.cursor == events[1].cursor and held.next_attempt_at > NOW  # not before a token is back


async def test_a_delivery_stops_once_a_replay_moved_the_cursor_under_its_lease() -> None:
    h = hooks()
    endpoint, _ = await h.registry.add("acme", URL, [], [], None)
    h.log.record([created("m1")])
    (lease,) = await h.store.claim(HOLDER, 30.0, NOW, 10)
    await h.registry.replay("acme", endpoint.id, "oldest")
    await h.dispatcher.deliver(lease)
    assert h.receiver.received == []  # the lease's cursor is not the endpoint's any more
    assert (await h.endpoint(endpoint.id)).cursor == START


async def test_a_leased_endpoint_is_not_claimed_again_until_its_lease_ends() -> None:
    h = hooks()
    await h.registry.add("acme", URL, [], [], None)
    assert len(await h.store.claim("server-b", 30.0, NOW, 10)) == 1
    assert await h.deliver_once() == 0
    h.clock.advance(timedelta(seconds=31))
    assert await h.deliver_once() == 1


async def test_a_tick_delivers_to_each_due_endpoint_in_a_task_of_its_own() -> None:
    h = hooks(max_concurrent=1)
    await h.registry.add("acme", URL, [], [], None)
    await h.registry.add("acme", URL + "/2", [], [], None)
    h.log.record([created("m1")])
    assert await h.dispatcher.tick() == 1  # one delivery slot
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name().startswith("webhook-")))
    assert await h.dispatcher.tick() == 1
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name().startswith("webhook-")))
    assert sorted(d.url for d in h.receiver.received) == [URL, URL + "/2"]


async def test_a_rotated_secret_signs_beside_the_previous_one_for_the_overlap() -> None:
    h = hooks()
    endpoint, old = await h.registry.add("acme", URL, [], [], None)
    rotated, new = await h.registry.rotate("acme", endpoint.id)
    assert new != old and rotated.previous_secret_until == NOW + timedelta(hours=24)
    h.log.record([created("during")])
    await h.deliver_once()
    during = h.receiver.received[-1]
    stamp, message = int(NOW.timestamp()), during.headers["webhook-id"]
    assert during.headers["webhook-signature"] == " ".join(
        sign(secret, message, stamp, during.body) for secret in (new, old)
    )
    h.clock.advance(timedelta(hours=25))
    h.log.record([created("after")])
    await h.deliver_once()
    after = h.receiver.received[-1]
    assert after.headers["webhook-signature"].count("v1,") == 1


@pytest.mark.parametrize(
    ("url", "event_types", "field", "reason"),
    [
        ("", [], "url", "is required"),
        ("ftp://hooks.example.com/", [], "url", "only http and https"),
        ("https://user:pw@hooks.example.com/", [], "url", "must not carry credentials"),
        ("https://10.0.0.7/hook", [], "url", "a private address"),
        ("https://nowhere.example.com/", [], "url", "does not resolve"),
        (URL, ["created", "exploded"], "event_types[1]", "unknown event type 'exploded'"),
        (URL, ["created"] * 65, "event_types", "65 given; at most 64"),
    ],
)
async def test_an_endpoint_that_cannot_be_delivered_to_is_refused_and_nothing_stored(
    url: str, event_types: list[str], field: str, reason: str
) -> None:
    h = hooks()
    with pytest.raises(InvalidArgument, match=reason) as err:
        await h.registry.add("acme", url, event_types, [], None)
    assert err.value.field == field
    assert await h.registry.endpoints("acme") == []


async def test_a_tenant_has_at_most_its_endpoints() -> None:
    h = hooks(max_endpoints_per_tenant=2)
    for n in range(2):
        await h.registry.add("acme", f"{URL}/{n}", [], [], None)
        h.clock.advance(timedelta(seconds=1))
    with pytest.raises(ResourceExhausted, match="tenant 'acme' has 2 webhook endpoints already"):
        await h.registry.add("acme", URL, [], [], None)
    await h.registry.add("globex", URL, [], [], None)  # another tenant's count is its own
    assert [e.url for e in await h.registry.endpoints("acme")] == [f"{URL}/0", f"{URL}/1"]


@pytest.mark.parametrize(
    ("endpoint_id", "error", "message"),
    [
        ("", InvalidArgument, "endpoint_id: is required"),
        ("not-an-id", InvalidArgument, "'not-an-id' is not an endpoint id"),
        ("00000000-0000-4000-8000-000000000009", NotFound, "webhook endpoint .* not found"),
    ],
)
async def test_an_unknown_endpoint_is_refused_by_each_call(
    endpoint_id: str, error: type[Exception], message: str
) -> None:
    h = hooks()
    for call in (
        h.registry.remove("acme", endpoint_id),
        h.registry.rotate("acme", endpoint_id),
        h.registry.replay("acme", endpoint_id, ""),
    ):
        with pytest.raises(error, match=message):
            await call


async def test_another_tenants_endpoint_is_not_found_and_stays() -> None:
    h = hooks()
    endpoint, _ = await h.registry.add("globex", URL, [], [], None)
    with pytest.raises(NotFound):
        await h.registry.remove("acme", endpoint.id)
    await h.registry.remove("globex", endpoint.id)
    assert await h.registry.endpoints("globex") == []


async def test_a_replay_from_a_malformed_cursor_is_refused() -> None:
    h = hooks()
    endpoint, _ = await h.registry.add("acme", URL, [], [], None)
    with pytest.raises(InvalidArgument, match="cursor: 'yesterday' is not a cursor"):
        await h.registry.replay("acme", endpoint.id, "yesterday")
