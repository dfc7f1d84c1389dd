"""The webhook sender against real HTTP(S) receivers on loopback: https with the certificate checked
against the host name while the connection goes to the checked address; the Host header; a refused
address at connection; bounded answers."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hindsight_server.domain.webhooks import AddressPolicy, parse_url
from hindsight_server.outbound.webhook_http import WebhookSender
from tests.support.certs import self_signed
from tests.support.processes import free_port
from tests.support.webhook_receiver import WebhookReceiver

LOOPBACK = AddressPolicy.of(False, ["127.0.0.1/32", "::1/128"])


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("webhook-tls"))  # localhost and 127.0.0.1


@pytest.fixture
async def https_receiver(certificate: tuple[Path, Path]) -> AsyncIterator[WebhookReceiver]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    receiver = WebhookReceiver(port=free_port(), host="localhost", tls=context)
    await receiver.start()
    yield receiver
    await receiver.stop()


def _sender(
    policy: AddressPolicy = LOOPBACK, ca_file: str = "", max_response_bytes: int = 1024
) -> WebhookSender:
    return WebhookSender(
        policy, timeout_s=3, max_response_bytes=max_response_bytes, max_connections=4, ca_file=ca_file
    )


async def test_https_checks_the_certificate_against_the_host_name(
    https_receiver: WebhookReceiver, certificate: tuple[Path, Path]
) -> None:
    trusting = _sender(ca_file=str(certificate[0]))
    try:
        outcome = await trusting.post(parse_url(https_receiver.url, 2_048), {"webhook-id": "e1"}, b'{"a":1}')
    finally:
        await trusting.close()
    assert outcome.delivered and outcome.status == 200, outcome
    (request,) = https_receiver.received
    assert request.headers["host"] == f"localhost:{https_receiver.port}"  # the name, not the address
    assert request.headers["webhook-id"] == "e1" and request.body == b'{"a":1}'
    assert request.headers["content-type"] == "application/json"

    # Without the CA the same endpoint is refused: the certificate really is checked.
    system_only = _sender()
    try:
        refused = await system_only.post(parse_url(https_receiver.url, 2_048), {}, b"{}")
    finally:
        await system_only.close()
    assert not refused.delivered and "certificate" in refused.error.lower(), refused
    assert len(https_receiver.received) == 1


async def test_a_refused_address_is_never_connected_to() -> None:
    receiver = WebhookReceiver(port=free_port())
    await receiver.start()
    sender = _sender(AddressPolicy())
    try:
        outcome = await sender.post(parse_url(receiver.url, 2_048), {"webhook-id": "x"}, b"{}")
    finally:
        await sender.close()
        await receiver.stop()
    assert not outcome.delivered and "a loopback address" in outcome.error
    assert receiver.received == []


async def test_a_huge_answer_is_read_up_to_the_bound() -> None:
    sent = asyncio.Event()

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n")
        try:
            for _ in range(1_000):  # up to 64 MiB, unless the sender hangs up first
                writer.write(b"x" * 65_536)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            sent.set()
            writer.close()

    server = await asyncio.start_server(flood, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sender = _sender(max_response_bytes=100_000)
    try:
        outcome = await sender.post(parse_url(f"http://127.0.0.1:{port}/h", 2_048), {}, b"{}")
        await asyncio.wait_for(sent.wait(), 10)  # the flood ended: the sender closed the connection
    finally:
        await sender.close()
        server.close()
    assert outcome.delivered
