"""Webhooks over real gRPC, PostgreSQL and HTTP: a receiver on loopback that is down, then slow, then
failing, then well gets every event, in order, duplicates only with the same webhook-id, each signature
verified by the Standard Webhooks reference library (through a secret rotation too); dead letter and
Replay; the SSRF policy at registration and at connection; the admin scope; hostile input."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from hindsight.client import HindsightClient
from hindsight.v1 import webhooks_pb2 as hooks_pb
from hindsight_server.config import Settings
from hindsight_server.domain.webhooks import AddressPolicy, parse_url
from hindsight_server.outbound.webhook_http import WebhookSender
from hindsight_server.pipelines.feed import FeedPipeline, FeedSettings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.rpc.auth import WEBHOOK_METHOD_SCOPES
from hindsight_server.store.feed import FeedStore
from tests.fixtures.postgres import dsn_for_database
from tests.support.eventually import eventually
from tests.support.memory_fields import MemoryFields
from tests.support.processes import create_key, free_port, run_cli
from tests.support.rich_errors import detail
from tests.support.webhook_receiver import WebhookReceiver

FACT = MemoryFields(tier="semantic", kind="fact")
# Quick retries and a short attempt timeout, loopback allowed: what the tests below need.
QUICK = {
    "webhooks__enabled": True,
    "webhooks__allowed_networks": ["127.0.0.1/32"],
    "webhooks__poll_s": 0.05,
    "webhooks__retry_base_s": 0.05,
    "webhooks__retry_cap_s": 0.2,
    "webhooks__attempt_timeout_s": 0.5,
    "webhooks__lease_s": 2.0,
    "feed__poll_s": 0.05,
}


@pytest.fixture(scope="module")
async def hooks_dsn(postgres_dsn: str) -> AsyncIterator[str]:
    """A database of this module's own: no other test's server delivers its endpoints."""
    name = f"t_hooks_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    yield dsn_for_database(postgres_dsn, name)
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


@pytest.fixture
async def start(
    make_settings: Callable[..., Settings], fresh_database: Callable[[], Awaitable[str]]
) -> AsyncIterator[Callable[..., Awaitable[tuple[RunningServer, str]]]]:
    """Starts a server of a test's own (QUICK settings plus overrides) on a database of its own: its
    retry policy and address policy are the only ones that deliver its endpoints. Stopped after the test."""
    started: list[RunningServer] = []

    async def make(**overrides: Any) -> tuple[RunningServer, str]:
        dsn = await fresh_database()
        running = await start_server(make_settings(database__dsn=dsn, **{**QUICK, **overrides}))
        started.append(running)
        return running, dsn

    yield make
    for running in started:
        await running.stop()


@pytest.fixture(scope="module")
async def hooks(make_settings: Callable[..., Settings], hooks_dsn: str) -> AsyncIterator[HindsightClient]:
    """The module's server: retries for ever (no endpoint dies), a rotation overlaps an hour."""
    overrides = {**QUICK, "webhooks__max_attempts": 1_000, "webhooks__rotation_overlap_s": 3_600}
    running = await start_server(make_settings(database__dsn=hooks_dsn, **overrides))
    async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=10) as client:
        yield client
    await running.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    made = WebhookReceiver(port=free_port())
    yield made
    await made.stop()


async def _endpoint(client: HindsightClient, tenant: str, endpoint_id: str) -> hooks_pb.WebhookEndpoint:
    (found,) = [e for e in await client.list_webhooks(tenant) if e.id == endpoint_id]
    return found


async def _until_dead(client: HindsightClient, tenant: str, endpoint_id: str) -> hooks_pb.WebhookEndpoint:
    """The endpoint once dead; failing after 10 s with the endpoint as last seen (where its delivery
    stood: attempts, cursor, last error)."""
    seen: list[hooks_pb.WebhookEndpoint] = []

    async def dead() -> bool:
        seen.append(await _endpoint(client, tenant, endpoint_id))
        return seen[-1].state == hooks_pb.WEBHOOK_STATE_DEAD

    await eventually(dead, timeout_s=10, message=lambda: f"not dead within 10 s: {seen[-1]}")
    return seen[-1]


def _position(cursor: str) -> tuple[int, int]:
    xid, seq = cursor.split(".")
    return int(xid), int(seq)


async def _refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value.code(), failed.value.details() or ""


# ------------------------------------------------------------------------------------------ delivery


async def test_down_slow_failing_then_well_gets_every_event_in_order(
    hooks: HindsightClient, receiver: WebhookReceiver, tenant: str
) -> None:
    added = await hooks.add_webhook(tenant, receiver.url)
    secret, endpoint_id = added.secret, added.endpoint.id
    assert secret.startswith("whsec_") and added.endpoint.state == hooks_pb.WEBHOOK_STATE_ACTIVE
    written = [(await hooks.write(tenant, f"fact number {i}", **FACT)).memory.id for i in range(3)]

    # Down: connections refused, attempts counted, the reason kept.
    async def failing() -> bool:
        return (await _endpoint(hooks, tenant, endpoint_id)).attempts >= 2

    await eventually(failing, timeout_s=10)
    assert "ConnectError" in (await _endpoint(hooks, tenant, endpoint_id)).last_error
    # Slow: past the attempt timeout (0.5 s).
    receiver.delay_s = 3.0
    await receiver.start()
    await eventually(lambda: any(r.status == 0 for r in receiver.received), timeout_s=10)
    # Failing: 500.
    receiver.delay_s, receiver.status = 0.0, 500
    await eventually(lambda: any(r.status == 500 for r in receiver.received), timeout_s=10)
    # Well.
    receiver.status = 200
    await eventually(lambda: len(receiver.delivered()) >= 3, timeout_s=10)
    await asyncio.sleep(0.3)  # nothing more comes

    delivered = [r.verified(secret) for r in receiver.delivered()]
    assert [d["memory_id"] for d in delivered] == written  # every event, in order, once
    assert [d["type"] for d in delivered] == ["created"] * 3
    # Every attempt carried the event's id as webhook-id, the same body for the same id.
    bodies: dict[str, bytes] = {}
    for request in receiver.received:
        assert bodies.setdefault(request.headers["webhook-id"], request.body) == request.body
        assert request.headers["webhook-id"] == request.event["id"]
        request.verified(secret)
    assert list(bodies) == [d["id"] for d in delivered]
    state = await _endpoint(hooks, tenant, endpoint_id)
    assert (state.attempts, state.last_error, state.delivered) == (0, "", 3)
    # At the last event or past it (the feed's horizon: every later event is after it).
    assert _position(state.cursor) >= _position(delivered[-1]["cursor"])


async def test_filters_select_the_events_sent(
    hooks: HindsightClient, receiver: WebhookReceiver, tenant: str
) -> None:
    await receiver.start()
    added = await hooks.add_webhook(tenant, receiver.url, event_types=["deleted"], subjects=["ana"])
    ana = await hooks.write(tenant, "Ana likes green tea", subject="ana", **FACT)
    bo = await hooks.write(tenant, "Bo lives in Porto", subject="bo", **FACT)
    await hooks.delete(tenant, bo.memory.id)
    await hooks.delete(tenant, ana.memory.id)
    await eventually(lambda: len(receiver.delivered()) >= 1, timeout_s=10)
    await asyncio.sleep(0.3)
    (only,) = [r.verified(added.secret) for r in receiver.delivered()]
    assert (only["type"], only["memory_id"], only["subject"]) == ("deleted", ana.memory.id, "ana")


async def test_a_rotation_signs_with_both_secrets(
    hooks: HindsightClient, receiver: WebhookReceiver, tenant: str
) -> None:
    await receiver.start()
    added = await hooks.add_webhook(tenant, receiver.url)
    await hooks.write(tenant, "before the rotation", **FACT)
    await eventually(lambda: len(receiver.delivered()) == 1, timeout_s=10)
    rotated = await hooks.rotate_webhook_secret(tenant, added.endpoint.id)
    assert rotated.secret != added.secret and rotated.endpoint.HasField("previous_secret_expires_at")
    await hooks.write(tenant, "during the overlap", **FACT)
    await eventually(lambda: len(receiver.delivered()) == 2, timeout_s=10)
    during = receiver.delivered()[1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert during.verified(added.secret) == during.verified(rotated.secret)  # either secret verifies


async def test_a_rotated_out_secret_stops_signing_at_its_expiry(
    start: Callable[..., Awaitable[tuple[RunningServer, str]]], receiver: WebhookReceiver, tenant: str
) -> None:
    running, _ = await start(webhooks__rotation_overlap_s=0)
    await receiver.start()
    async with HindsightClient(f"127.0.0.1:{running.port}") as client:
        added = await client.add_webhook(tenant, receiver.url)
        rotated = await client.rotate_webhook_secret(tenant, added.endpoint.id)
        await client.write(tenant, "after the overlap", **FACT)
        await eventually(lambda: len(receiver.delivered()) >= 1, timeout_s=10)
    after = receiver.delivered()[0]
    assert after.verified(rotated.secret)["type"] == "created"
    with pytest.raises(WebhookVerificationError):
        Webhook(added.secret).verify(after.body, after.headers)


async def test_dead_after_its_attempts_then_replay_revives_it(
    start: Callable[..., Awaitable[tuple[RunningServer, str]]], receiver: WebhookReceiver, tenant: str
) -> None:
    running, _ = await start(webhooks__max_attempts=3)
    receiver.status = 500
    await receiver.start()
    async with HindsightClient(f"127.0.0.1:{running.port}") as client:
        added = await client.add_webhook(tenant, receiver.url)
        written = [(await client.write(tenant, f"kept {i}", **FACT)).memory.id for i in range(2)]

        state = await _until_dead(client, tenant, added.endpoint.id)
        assert state.attempts == 3 and state.last_error == "answered HTTP 500"
        tried = len(receiver.received)
        assert tried == 3 and {r.event["memory_id"] for r in receiver.received} == {written[0]}
        # Dead at the event that kept failing: the cursor stays before it.
        assert state.HasField("dead_at")
        assert _position(state.cursor) < _position(receiver.received[0].event["cursor"])
        receiver.status = 200
        await asyncio.sleep(0.5)
        assert len(receiver.received) == tried  # dead: nothing is sent

        revived = await client.replay_webhook(tenant, added.endpoint.id, added.endpoint.cursor)
        assert revived.state == hooks_pb.WEBHOOK_STATE_ACTIVE and revived.attempts == 0
        await eventually(lambda: len(receiver.delivered()) >= 2, timeout_s=10)
        assert [r.verified(added.secret)["memory_id"] for r in receiver.delivered()] == written

        # From "oldest": all again, as many times as asked.
        await client.replay_webhook(tenant, added.endpoint.id, "oldest")
        await eventually(lambda: len(receiver.delivered()) >= 4, timeout_s=10)
        assert [r.event["memory_id"] for r in receiver.delivered()] == written * 2


# ------------------------------------------------------------------------------------------------ SSRF


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:9/h", "loopback"),
        ("http://localhost:9/h", "loopback"),  # a name is resolved and its addresses checked
        ("http://10.1.2.3/h", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::1]:9/h", "loopback"),
        ("http://[::ffff:127.0.0.1]:9/h", "loopback"),
        ("http://0.0.0.0:9/h", "unspecified"),
    ],
)
async def test_private_addresses_are_refused_unless_allowed(
    start: Callable[..., Awaitable[tuple[RunningServer, str]]], url: str, why: str, tenant: str
) -> None:
    running, _ = await start(webhooks__allowed_networks=[])
    async with HindsightClient(f"127.0.0.1:{running.port}") as client:
        code, message = await _refused(client.add_webhook(tenant, url))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert message.startswith("url: ") and f"a {why} address" in message
        assert await client.list_webhooks(tenant) == []


async def test_every_connection_checks_the_address_again(receiver: WebhookReceiver) -> None:
    """What was allowed at registration is refused at connection when the policy (or the name's
    address) changed: the sender connects only to an address it checked just before."""
    await receiver.start()
    sender = WebhookSender(AddressPolicy(), timeout_s=2, max_response_bytes=1024, max_connections=2)
    try:
        outcome = await sender.post(parse_url(receiver.url, 2_048), {"webhook-id": "x"}, b"{}")
    finally:
        await sender.close()
    assert not outcome.delivered and "a loopback address" in outcome.error
    assert receiver.received == []


async def test_redirects_are_not_followed(hooks: HindsightClient, tenant: str) -> None:
    target = WebhookReceiver(port=free_port())
    await target.start()

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 307 X\r\nlocation: {target.url}\r\ncontent-length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    redirector = await asyncio.start_server(redirect, "127.0.0.1", 0)
    try:
        port = redirector.sockets[0].getsockname()[1]
        added = await hooks.add_webhook(tenant, f"http://127.0.0.1:{port}/h")
        await hooks.write(tenant, "redirected?", **FACT)

        async def failed() -> bool:
            return (await _endpoint(hooks, tenant, added.endpoint.id)).last_error == "answered HTTP 307"

        await eventually(failed, timeout_s=10)
        assert target.received == []
    finally:
        redirector.close()
        await target.stop()
        await hooks.remove_webhook(tenant, added.endpoint.id)


# ------------------------------------------------------------------------------------------ registry


async def test_add_list_remove(hooks: HindsightClient, receiver: WebhookReceiver, tenant: str) -> None:
    first = await hooks.add_webhook(tenant, receiver.url, event_types=["created", "deleted"])
    second = await hooks.add_webhook(tenant, receiver.url + "?second=1", subjects=["ana"])
    listed = await hooks.list_webhooks(tenant)
    assert [e.id for e in listed] == [first.endpoint.id, second.endpoint.id]
    assert list(listed[0].event_types) == ["created", "deleted"] and list(listed[1].subjects) == ["ana"]
    assert all(not hasattr(e, "secret") for e in listed)  # the secret is never listed
    assert await hooks.list_webhooks(f"{tenant}-other") == []  # another tenant's are not seen
    await hooks.remove_webhook(tenant, first.endpoint.id)
    assert [e.id for e in await hooks.list_webhooks(tenant)] == [second.endpoint.id]
    code, _ = await _refused(hooks.remove_webhook(tenant, first.endpoint.id))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await _refused(hooks.remove_webhook(f"{tenant}-other", second.endpoint.id))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c, t: c.add_webhook(t, "http://127.0.0.1:9/" + "a" * 100_000), "url"),
        (lambda c, t: c.add_webhook(t, "gopher://127.0.0.1/"), "url"),
        (lambda c, t: c.add_webhook(t, "http://u:p@127.0.0.1/"), "url"),
        (lambda c, t: c.add_webhook(t, ""), "url"),
        (
            lambda c, t: c.add_webhook(t, "http://127.0.0.1:9/", event_types=["created", "x"]),
            "event_types[1]",
        ),
        (
            lambda c, t: c.add_webhook(t, "http://127.0.0.1:9/", event_types=["created"] * 1_000),
            "event_types",
        ),
        (
            lambda c, t: c.add_webhook(t, "http://127.0.0.1:9/", subjects=[f"s{i}" for i in range(1_000)]),
            "subjects",
        ),
        (lambda c, t: c.add_webhook(t, "http://127.0.0.1:9/", subjects=["x" * 10_000]), "subjects[0]"),
        (lambda c, t: c.remove_webhook(t, "not-an-id"), "endpoint_id"),
        (lambda c, t: c.remove_webhook(t, "x" * 10_000), "endpoint_id"),
        (lambda c, t: c.rotate_webhook_secret(t, ""), "endpoint_id"),
        (lambda c, t: c.replay_webhook(t, "nope", "oldest"), "endpoint_id"),
        (lambda c, t: c.add_webhook("bad tenant!", "http://127.0.0.1:9/"), "tenant_id"),
    ],
)
async def test_bad_input_names_the_field(hooks: HindsightClient, tenant: str, call: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(hooks, tenant)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violation = detail(refused.value, error_details_pb2.BadRequest)
    assert violation is not None and violation.field_violations[0].field == field
    assert len(refused.value.details() or "") < 1_000  # a huge input is not echoed back


async def test_a_bad_or_expired_replay_cursor_is_refused(
    hooks: HindsightClient, receiver: WebhookReceiver, tenant: str
) -> None:
    added = await hooks.add_webhook(tenant, receiver.url)
    code, message = await _refused(hooks.replay_webhook(tenant, added.endpoint.id, "12.x"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("cursor: ")
    code, _ = await _refused(hooks.replay_webhook(tenant, str(uuid.uuid4()), "oldest"))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_a_thousand_endpoints_are_refused_past_the_bound(
    hooks: HindsightClient, receiver: WebhookReceiver, tenant: str
) -> None:
    attempts = await asyncio.gather(
        *(hooks.add_webhook(tenant, f"{receiver.url}?n={i}") for i in range(1_000)), return_exceptions=True
    )
    added = [a for a in attempts if isinstance(a, hooks_pb.AddEndpointResponse)]
    refused = [a for a in attempts if isinstance(a, grpc.aio.AioRpcError)]
    assert len(added) == 20 and len(refused) == 980  # webhooks.max_endpoints_per_tenant, under concurrency
    assert {r.code() for r in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert "max_endpoints_per_tenant" in (refused[0].details() or "")
    assert len(await hooks.list_webhooks(tenant)) == 20


# ------------------------------------------------------------------------------------------------ keys


def test_every_webhooks_method_needs_a_scope() -> None:
    service = hooks_pb.DESCRIPTOR.services_by_name["WebhooksService"]
    assert set(WEBHOOK_METHOD_SCOPES) == {method.name for method in service.methods}


async def test_webhooks_need_the_tenants_admin_key(
    start: Callable[..., Awaitable[tuple[RunningServer, str]]], receiver: WebhookReceiver, tenant: str
) -> None:
    running, dsn = await start(security__require_api_keys=True, security__api_key_cache_s=0)
    target = f"127.0.0.1:{running.port}"
    everyday = await create_key(dsn, tenant)  # read, write
    admin = await create_key(dsn, tenant, "--scopes", "admin")
    other_admin = await create_key(dsn, f"{tenant}-other", "--scopes", "admin")
    async with HindsightClient(target) as anonymous:
        code, _ = await _refused(anonymous.list_webhooks(tenant))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    async with HindsightClient(target, api_key=everyday["api_key"]) as client:
        code, message = await _refused(client.add_webhook(tenant, receiver.url))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "admin scope" in message
    async with HindsightClient(target, api_key=other_admin["api_key"]) as client:
        code, _ = await _refused(client.list_webhooks(tenant))
        assert code == grpc.StatusCode.PERMISSION_DENIED
    async with HindsightClient(target, api_key=admin["api_key"]) as client:
        added = await client.add_webhook(tenant, receiver.url)
        assert [e.id for e in await client.list_webhooks(tenant)] == [added.endpoint.id]


# ------------------------------------------------------------------------------------------------- CLI


async def test_the_cli_adds_lists_rotates_replays_and_removes(
    hooks: HindsightClient, receiver: WebhookReceiver, tenant: str
) -> None:
    await receiver.start()
    connection = ["--target", hooks.target, "--tenant", tenant]
    added = await run_cli(
        [
            "webhooks",
            "add",
            receiver.url,
            "--event-types",
            "created,deleted",
            "--subjects",
            "ana",
            *connection,
        ]
    )
    assert added.code == 0, added.stderr
    endpoint_id, _, _ = added.stdout.partition("  ")
    secret = next(
        line.removeprefix("secret: ") for line in added.stdout.splitlines() if line.startswith("secret")
    )
    assert secret.startswith("whsec_") and "shown only now" in added.stdout

    await hooks.write(tenant, "Ana's first", subject="ana", **FACT)
    await eventually(lambda: len(receiver.delivered()) == 1, timeout_s=10)
    assert receiver.delivered()[0].verified(secret)["subject"] == "ana"

    listed = await run_cli(["webhooks", "list", "--json", *connection])
    assert listed.code == 0, listed.stderr
    (shown,) = json.loads(listed.stdout)
    assert shown["id"] == endpoint_id and shown["event_types"] == ["created", "deleted"]
    assert shown["delivered"] == 1 and "secret" not in shown
    plain = await run_cli(["webhooks", "list", *connection])
    assert endpoint_id in plain.stdout and "active" in plain.stdout and "delivered 1" in plain.stdout

    rotated = await run_cli(["webhooks", "rotate", endpoint_id, "--json", *connection])
    assert rotated.code == 0, rotated.stderr
    new_secret = json.loads(rotated.stdout)["secret"]
    assert new_secret.startswith("whsec_") and new_secret != secret

    replayed = await run_cli(["webhooks", "replay", endpoint_id, "--from", "oldest", *connection])
    assert replayed.code == 0, replayed.stderr
    await eventually(lambda: len(receiver.delivered()) == 2, timeout_s=10)
    again = receiver.delivered()[1]
    assert again.headers["webhook-id"] == receiver.delivered()[0].headers["webhook-id"]
    assert again.verified(new_secret) == again.verified(secret)  # both sign during the overlap

    bad = await run_cli(["webhooks", "replay", endpoint_id, "--from", "nope", *connection])
    assert bad.code != 0 and "INVALID_ARGUMENT: cursor:" in bad.stderr
    removed = await run_cli(["webhooks", "remove", endpoint_id, *connection])
    assert removed.code == 0 and f"removed {endpoint_id}" in removed.stdout
    gone = await run_cli(["webhooks", "remove", endpoint_id, *connection])
    assert gone.code != 0 and "NOT_FOUND" in gone.stderr
    refused = await run_cli(["webhooks", "add", "http://10.0.0.1/h", *connection])
    assert refused.code != 0 and "a private address" in refused.stderr


async def test_an_endpoint_behind_the_feeds_retention_dies_instead_of_skipping_events(
    start: Callable[..., Awaitable[tuple[RunningServer, str]]], receiver: WebhookReceiver, tenant: str
) -> None:
    running, dsn = await start()
    async with HindsightClient(f"127.0.0.1:{running.port}") as client:
        added = await client.add_webhook(tenant, receiver.url)  # the receiver is down: nothing delivered
        await client.write(tenant, "trimmed before it was delivered", **FACT)

        async def retrying() -> bool:
            return (await _endpoint(client, tenant, added.endpoint.id)).attempts >= 1

        await eventually(retrying, timeout_s=10)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
        try:  # the retention job, run as if eight days had passed
            trimmed = await FeedPipeline(FeedStore(pool), FeedSettings()).trim(
                datetime.now(UTC) + timedelta(days=8)
            )
        finally:
            await pool.close()
        assert trimmed >= 1

        state = await _until_dead(client, tenant, added.endpoint.id)
        assert "passed the feed's retention" in state.last_error
        await receiver.start()
        code, message = await _refused(client.replay_webhook(tenant, added.endpoint.id, state.cursor))
        assert code == grpc.StatusCode.OUT_OF_RANGE and "older than the feed keeps" in message
        await client.replay_webhook(tenant, added.endpoint.id, "oldest")
        later = await client.write(tenant, "after the replay", **FACT)
        await eventually(lambda: len(receiver.delivered()) >= 1, timeout_s=10)
        assert [r.verified(added.secret)["memory_id"] for r in receiver.delivered()] == [later.memory.id]


@pytest.mark.parametrize(
    ("method", "raw", "field"),
    [
        ("AddEndpoint", b"\x0a\x04acme\x12\x02\xc3\x28", "url"),  # url: invalid UTF-8
        ("AddEndpoint", b"\x0a\x04acme\x1a\x01\xff", "event_types[0]"),
        ("Replay", b"\x0a\x04acme\x12\x01\xff", "endpoint_id"),
        ("ListEndpoints", b"\xff\xff\xff", ""),  # not a message at all
    ],
)
async def test_bytes_that_do_not_parse_are_invalid_argument(
    hooks: HindsightClient, method: str, raw: bytes, field: str
) -> None:
    async with grpc.aio.insecure_channel(hooks.target) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/hindsight.v1.WebhooksService/{method}", request_serializer=None, response_deserializer=None
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(raw, timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith(field)
