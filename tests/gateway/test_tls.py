"""TLS on both sides of the gateway: its HTTP transport serves HTTPS with the configured certificate and
nothing over plain HTTP; its channel to the memory servers speaks TLS, with a client certificate for
servers that require one (mTLS), through the SDK's own client on both transports."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx2
import pytest

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.gateway.conftest import Connect
from tests.support.certs import SERVER_NAME, Pki, pki, self_signed, server_tls
from tests.support.mcp_sessions import INITIALIZE, INITIALIZE_HEADERS, http_gateway


async def test_the_http_gateway_serves_https_when_configured(tmp_path: Path, memory_target: str) -> None:
    cert, key = self_signed(tmp_path)
    settings = load_gateway_settings(
        port=0,
        targets=[memory_target],
        tokens={hash_token("secret-token"): "acme"},
        tls_cert_file=str(cert),
        tls_key_file=str(key),
    )
    async with http_gateway(settings) as url:
        assert url.startswith("https://127.0.0.1:")
        headers = {**INITIALIZE_HEADERS, "Authorization": "Bearer secret-token"}
        async with httpx2.AsyncClient(verify=ssl.create_default_context(cafile=str(cert))) as secure:
            answered = await secure.post(url, json=INITIALIZE, headers=headers)
            assert answered.status_code == 200, answered.text
            assert "hindsight" in answered.text
            refused = await secure.post(url, json=INITIALIZE)  # no token: still refused
            assert refused.status_code == 401
        async with httpx2.AsyncClient() as plain:
            with pytest.raises(httpx2.HTTPError):
                await plain.post(url.replace("https://", "http://"), json=INITIALIZE, headers=headers)


def test_a_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError, match="tls_cert_file and tls_key_file go together"):
        load_gateway_settings(tls_cert_file="/some/cert.pem")


# ------------------------------------------------------------------ the gateway's channel to the servers


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
async def mtls_target(make_settings: Callable[..., Settings], certs: Pki) -> AsyncIterator[str]:
    running = await start_server(make_settings(**server_tls(certs, client_certificates=True)))
    yield f"127.0.0.1:{running.port}"
    await running.stop()


async def test_the_gateway_reaches_servers_that_require_client_certificates(
    connect: Connect, mtls_target: str, certs: Pki
) -> None:
    tls = {
        "targets_ca_file": str(certs.ca),
        "targets_cert_file": str(certs.client_cert),
        "targets_key_file": str(certs.client_key),
        "targets_server_name": SERVER_NAME,
    }
    write = {"session_id": "s", "memory_type": "semantic", "summary": "用户偏好靠窗座位"}
    async with connect(targets=[mtls_target], **tls) as session:
        written = await session.call_tool("memory_write", write)
        assert not written.is_error, written
        recalled = await session.call_tool("memory_recall", {"session_id": "s", "query": "靠窗"})
        assert not recalled.is_error and "靠窗" in str(recalled.content), recalled
    # Without the client certificate, or in plaintext, the servers refuse the gateway's connection.
    no_certificate = {"targets_ca_file": str(certs.ca), "deadline_s": 2.0}
    for refused_settings in (no_certificate, {"deadline_s": 2.0}):
        async with connect(targets=[mtls_target], **refused_settings) as session:
            refused = await session.call_tool("memory_recall", {"session_id": "s", "query": "靠窗"})
            assert refused.is_error and "unavailable" in str(refused.content), refused


def test_a_client_certificate_for_the_servers_needs_its_key() -> None:
    with pytest.raises(ValueError, match="targets_cert_file and targets_key_file"):
        load_gateway_settings(targets_cert_file="/some/client.pem")
