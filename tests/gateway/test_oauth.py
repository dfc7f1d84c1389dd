"""The gateway as an OAuth protected resource (the MCP authorization specification): RFC 9728 metadata
names the authorization server, every 401 points to it, and that server's access tokens are accepted
when its RFC 7662 introspection says they are active, for this gateway, and name a tenant. The
authorization server here is a real HTTP server the test starts, answering introspection from a table."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from hindsight.client import HindsightClient
from tests.support.eventually import eventually
from tests.support.mcp_sessions import INITIALIZE, INITIALIZE_HEADERS, http_gateway, http_session
from tests.support.processes import free_port

CLIENT_ID, CLIENT_SECRET = "hindsight-gateway", "introspection-secret"


@asynccontextmanager
async def authorization_server(
    claims_by_token: dict[str, dict[str, Any]], port: int | None = None
) -> AsyncIterator[tuple[str, list[str]]]:
    """An RFC 7662 introspection endpoint on `port` (None: a free one): its base URL, and the tokens
    it was asked about. Callers must authenticate."""
    expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
    calls: list[str] = []

    async def introspect(request: Request) -> Response:
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        token = str((await request.form()).get("token", ""))
        calls.append(token)
        return JSONResponse(claims_by_token.get(token, {"active": False}))

    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/introspect", introspect, methods=["POST"])]),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    serving = asyncio.ensure_future(server.serve())
    await eventually(lambda: server.started, timeout_s=10, poll_s=0.01)
    try:
        yield f"http://127.0.0.1:{port}", calls
    finally:
        server.should_exit = True
        await serving


async def test_an_authorization_servers_tokens_act_for_the_tenant_they_name(
    memory_target: str, client: HindsightClient, tenant: str
) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    static = f"static-{uuid.uuid4().hex}"
    claims: dict[str, dict[str, Any]] = {
        "good": {"active": True, "aud": [resource], "tenant": tenant, "client_id": "agent-1", "scope": "mcp"},
        "for-another-resource": {"active": True, "aud": "https://elsewhere.example/mcp", "tenant": tenant},
        "revoked": {"active": False},
        "no-tenant": {"active": True, "aud": resource},
    }
    async with authorization_server(claims) as (issuer, introspected):
        settings = load_gateway_settings(
            port=port,
            targets=[memory_target],
            tokens={hash_token(static): f"{tenant}-static"},
            resource_url=resource,
            authorization_servers=issuer,
            introspection_url=f"{issuer}/introspect",
            introspection_client_id=CLIENT_ID,
            introspection_client_secret=CLIENT_SECRET,
        )
        async with http_gateway(settings) as url, httpx2.AsyncClient(timeout=10) as http:
            metadata = (
                await http.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp")
            ).json()
            anonymous = await http.post(url, json=INITIALIZE, headers=INITIALIZE_HEADERS)
            refused = {
                token: (
                    await http.post(
                        url,
                        json=INITIALIZE,
                        headers={**INITIALIZE_HEADERS, "Authorization": f"Bearer {token}"},
                    )
                ).status_code
                for token in ("for-another-resource", "revoked", "no-tenant", "never-issued")
            }
            async with http_session(url, "good") as session:
                written = await session.call_tool(
                    "memory_write",
                    {"session_id": "s", "memory_type": "semantic", "summary": "prefers aisle seats"},
                )
            async with http_session(url, static) as session:  # the hashed tokens keep working
                assert not (
                    await session.call_tool("memory_recall", {"session_id": "s", "query": "x"})
                ).is_error

    assert metadata["resource"] == resource
    assert metadata["authorization_servers"] == [f"{issuer}/"]
    assert metadata["bearer_methods_supported"] == ["header"]
    assert anonymous.status_code == 401
    assert (
        f'resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
        in anonymous.headers["www-authenticate"]
    )
    assert refused == dict.fromkeys(refused, 401)
    assert not written.is_error
    assert [m.content async for m in client.list_all(tenant)] == ["prefers aisle seats"]
    # One introspection per token: the session's several requests reuse the answer; hashed tokens
    # never reach the authorization server.
    assert introspected.count("good") == 1 and static not in introspected


def test_an_authorization_server_needs_the_resource_url_and_introspection() -> None:
    with pytest.raises(ValueError, match="authorization_servers needs resource_url"):
        load_gateway_settings(authorization_servers="https://auth.example.com")
