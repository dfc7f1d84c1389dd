"""The HTTP transport with TLS: HTTPS with the configured certificate, nothing over plain HTTP."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx2
import pytest

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from tests.support.certs import self_signed
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
