"""Who is calling, over HTTP: a bearer token names the tenant; a missing or wrong token gets 401 before
any tool runs; no token configured is allowed on loopback only (one configured tenant)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import uuid
from pathlib import Path

import httpx2
import pytest
from mcp import MCPError

from gateway_mcp.auth import hash_token
from gateway_mcp.config import GatewayConfigError, load_gateway_settings
from gateway_mcp.server import HttpGateway
from hindsight.client import HindsightClient
from tests.support.mcp_sessions import INITIALIZE, INITIALIZE_HEADERS, http_gateway, http_session
from tests.support.processes import free_port, run_cli


async def _post(url: str, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(url, json=INITIALIZE, headers={**INITIALIZE_HEADERS, **headers})


async def test_a_missing_or_wrong_token_gets_401(memory_target: str) -> None:
    token = f"secret-{uuid.uuid4().hex}"
    settings = load_gateway_settings(port=0, targets=[memory_target], tokens={hash_token(token): "acme"})
    async with http_gateway(settings) as url:
        missing = await _post(url, {})
        wrong = await _post(url, {"Authorization": "Bearer not-the-token"})
        right = await _post(url, {"Authorization": f"Bearer {token}"})
        with pytest.raises(ExceptionGroup) as refused:  # the SDK's client raises from its task groups
            async with http_session(url, "not-the-token"):
                pass
    for response in (missing, wrong):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
        assert response.json()["error"] == "invalid_token"
    assert right.status_code == 200 and right.json()["result"]["serverInfo"]["name"] == "hindsight"
    assert refused.group_contains(MCPError)


async def test_each_token_acts_for_its_own_tenant(memory_target: str, client: HindsightClient) -> None:
    tokens = {name: f"{name}-{uuid.uuid4().hex}" for name in ("alice", "bob")}
    tenants = {name: f"t-{name}-{uuid.uuid4().hex[:8]}" for name in tokens}
    settings = load_gateway_settings(
        port=0, targets=[memory_target], tokens={hash_token(tokens[n]): tenants[n] for n in tokens}
    )
    write = {"session_id": "s", "memory_type": "semantic", "summary": "alice 的密码提示是蓝色鲸鱼"}
    recall = {"session_id": "s", "query": "蓝色鲸鱼"}
    async with http_gateway(settings) as url:
        async with http_session(url, tokens["alice"]) as alice:
            written = await alice.call_tool("memory_write", write)
            assert not written.is_error
            mine = await alice.call_tool("memory_recall", recall)
        async with http_session(url, tokens["bob"]) as bob:
            theirs = await bob.call_tool("memory_recall", recall)
    assert mine.structured_content is not None and len(mine.structured_content["hits"]) == 1
    assert theirs.structured_content is not None and theirs.structured_content["hits"] == []
    assert [m.content async for m in client.list_all(tenants["alice"])] == [write["summary"]]
    assert [m async for m in client.list_all(tenants["bob"])] == []


async def test_loopback_without_tokens_serves_the_configured_tenant(
    memory_target: str, client: HindsightClient, tenant: str
) -> None:
    settings = load_gateway_settings(port=0, targets=[memory_target], tenant=tenant, tokens={})
    async with http_gateway(settings) as url, http_session(url) as session:
        result = await session.call_tool(
            "memory_write", {"session_id": "s", "memory_type": "semantic", "summary": "local agent memory"}
        )
    assert not result.is_error
    assert [m.content async for m in client.list_all(tenant)] == ["local agent memory"]


async def test_a_foreign_host_header_is_refused_on_loopback(memory_target: str) -> None:
    settings = load_gateway_settings(port=0, targets=[memory_target], tokens={})
    async with http_gateway(settings) as url:
        response = await _post(url, {"Host": "attacker.example:8765"})
    assert response.status_code == 421  # DNS rebinding: a web page cannot reach a local gateway


async def test_http_beyond_loopback_needs_tokens(memory_target: str) -> None:
    open_settings = load_gateway_settings(port=0, host="0.0.0.0", targets=[memory_target], tokens={})
    with pytest.raises(GatewayConfigError, match=r"on 0\.0\.0\.0 without bearer tokens"):
        HttpGateway(open_settings)
    result = await run_cli(
        ["mcp", "--http", "--host", "0.0.0.0", "--port", "0"], env={"HINDSIGHT_MCP__TOKENS": "{}"}
    )
    assert result.code == 2
    assert "refusing to serve MCP over HTTP on 0.0.0.0 without bearer tokens" in result.stderr
    assert "Traceback" not in result.stderr
    # With tokens it serves on every interface.
    guarded = open_settings.model_copy(update={"tokens": {hash_token("t"): "acme"}})
    gateway = HttpGateway(guarded)
    url = await gateway.start()
    try:
        assert url.startswith("http://0.0.0.0:")
        async with httpx2.AsyncClient(timeout=10) as http:
            probe = await http.get(f"http://127.0.0.1:{gateway.port}/healthz")
        assert probe.status_code == 200
    finally:
        await gateway.stop()


async def test_up_refuses_an_open_gateway_before_starting_anything(tmp_path: Path) -> None:
    result = await run_cli(
        ["up", "--data-dir", str(tmp_path), "--port", str(free_port())],
        env={"HINDSIGHT_MCP__HOST": "0.0.0.0", "HINDSIGHT_MCP__TOKENS": "{}"},
    )
    assert result.code == 1
    assert "hindsight up failed: MCP gateway: refusing to serve MCP over HTTP on 0.0.0.0" in result.stderr
    assert not (tmp_path / "postgres").exists()


async def test_hash_token_prints_the_sha256_to_configure() -> None:
    process = await _hash_token_cli("s3cret-token\n")
    assert process == hashlib.sha256(b"s3cret-token").hexdigest() == hash_token("s3cret-token")


async def _hash_token_cli(stdin: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hindsight_server",
        "mcp",
        "--hash-token",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    stdout, _ = await asyncio.wait_for(process.communicate(stdin.encode()), 30)
    assert process.returncode == 0
    return stdout.decode().strip()


def test_tokens_are_configured_as_hashes_only() -> None:
    with pytest.raises(ValueError, match="SHA-256 hashes of the tokens"):
        load_gateway_settings(tokens={"my-plain-token": "acme"})
