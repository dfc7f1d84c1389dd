"""The Origin check the MCP transport specification requires: a browser page from another origin gets
403, on loopback and off it; clients that send no Origin (SDKs, agents) are served."""

from __future__ import annotations

import re
import uuid

import httpx2
import pytest

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from gateway_mcp.origins import origin_allowed
from tests.support.mcp_sessions import INITIALIZE, INITIALIZE_HEADERS, http_gateway


@pytest.mark.parametrize(
    ("origin", "allowed", "expected"),
    [
        (None, (), True),  # not a browser page
        ("", (), True),
        ("https://app.example.com", ("https://app.example.com",), True),
        ("https://app.example.com", (), False),
        ("https://app.example.com.evil.net", ("https://app.example.com",), False),
        ("http://localhost:6274", ("http://localhost:*",), True),  # any port of the host
        ("http://localhost", ("http://localhost:*",), False),  # ":*" wants a port
        ("http://localhost:6274.evil.net", ("http://localhost:*",), False),
        ("http://localhost.evil.net:80", ("http://localhost:*",), False),
        ("https://localhost:6274", ("http://localhost:*",), False),  # another scheme
        ("null", ("https://app.example.com",), False),  # a sandboxed page or a file
    ],
)
def test_origin_allowed(origin: str | None, allowed: tuple[str, ...], expected: bool) -> None:
    assert origin_allowed(origin, allowed) is expected


async def _post(url: str, token: str | None, origin: str | None) -> int:
    headers = dict(INITIALIZE_HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if origin is not None:
        headers["Origin"] = origin
    async with httpx2.AsyncClient(timeout=10) as http:
        return (await http.post(url, json=INITIALIZE, headers=headers)).status_code


async def test_off_loopback_only_the_configured_origins_are_served(memory_target: str) -> None:
    token = f"secret-{uuid.uuid4().hex}"
    settings = load_gateway_settings(
        host="0.0.0.0",
        port=0,
        targets=[memory_target],
        tokens={hash_token(token): "acme"},
        allowed_origins="https://app.example.com, https://tools.example.com:*",
    )
    async with http_gateway(settings) as url:
        assert await _post(url, token, None) == 200  # an SDK client or an agent
        assert await _post(url, token, "https://app.example.com") == 200
        assert await _post(url, token, "https://tools.example.com:8443") == 200
        assert await _post(url, token, "https://evil.example.net") == 403
        assert await _post(url, token, "http://127.0.0.1:6274") == 403  # loopback pages too, off loopback
        assert await _post(url, None, "https://evil.example.net") == 403  # before the token is looked at


async def test_on_loopback_local_pages_are_served_and_others_refused(memory_target: str) -> None:
    settings = load_gateway_settings(port=0, targets=[memory_target])
    async with http_gateway(settings) as url:
        assert await _post(url, None, None) == 200
        assert await _post(url, None, "http://localhost:6274") == 200  # e.g. the MCP Inspector's web UI
        assert await _post(url, None, "https://evil.example.net") == 403


def test_an_origin_with_a_path_is_refused_in_the_configuration() -> None:
    with pytest.raises(ValueError, match=re.escape("allowed origin 'https://app.example.com/mcp'")):
        load_gateway_settings(allowed_origins="https://app.example.com/mcp")
