"""`hindsight up --servers 2` with the servers on TLS (security.tls_cert_file): nginx listens with TLS and
calls the servers over TLS, the MCP gateway `up` starts reaches them over TLS, and nothing in the stack
answers plaintext. On the session's PostgreSQL, without Triton, as tests/stack/test_cluster.py."""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight.tls import ClientTls
from hindsight_server.stack.nginx import NginxNotFound, find_nginx
from tests.fixtures.postgres import dsn_for_database
from tests.support.certs import self_signed
from tests.support.mcp_sessions import http_session
from tests.support.processes import Background, free_port

try:
    find_nginx()
except NginxNotFound as missing:  # `make` installs it; a bare checkout without root may lack it
    pytest.skip(str(missing), allow_module_level=True)


@dataclass
class TlsStack:
    output: str
    target: str  # nginx
    server: str  # the first memory server
    mcp_url: str
    ca_file: Path


@pytest.fixture(scope="module")
async def tls_stack(postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TlsStack]:
    database = f"tls_{uuid.uuid4().hex[:10]}"
    connection = await asyncpg.connect(postgres_dsn)
    await connection.execute(f'CREATE DATABASE "{database}"')
    await connection.close()
    data_dir = tmp_path_factory.mktemp("tls-stack")
    cert, key = self_signed(tmp_path_factory.mktemp("certs"))
    port, first_server, mcp_port = free_port(), free_port(), free_port()
    env = {
        "HINDSIGHT_STACK__INFERENCE": "false",
        "HINDSIGHT_STACK__SERVERS_PORT": str(first_server),
        "HINDSIGHT_SECURITY__TLS_CERT_FILE": str(cert),
        "HINDSIGHT_SECURITY__TLS_KEY_FILE": str(key),
        "HINDSIGHT_MCP__PORT": str(mcp_port),
        "HINDSIGHT_MCP__TENANT": "acme-tls",
        "HINDSIGHT_DATABASE__POOL_MIN": "1",
        "HINDSIGHT_DATABASE__POOL_MAX": "2",
    }
    dsn = dsn_for_database(postgres_dsn, database)
    args = ["up", "--servers", "2", "--no-console", "--data-dir", str(data_dir), "--port", str(port)]
    stack = Background([*args, "--dsn", dsn], env=env)
    await stack.start()
    try:
        await stack.wait_for(r"hindsight is up:[\s\S]*Ctrl-C stops everything", timeout_s=60)
        yield TlsStack(
            stack.output,
            f"127.0.0.1:{port}",
            f"127.0.0.1:{first_server}",
            f"http://127.0.0.1:{mcp_port}/mcp",
            cert,
        )
    finally:
        code = await stack.stop(signal.SIGINT)
        connection = await asyncpg.connect(postgres_dsn)
        await connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await connection.close()
    assert code == 0, stack.output


async def test_every_part_speaks_tls_to_the_servers_and_nothing_answers_plaintext(
    tls_stack: TlsStack,
) -> None:
    assert f"grpcs://{tls_stack.target} (least_conn over 2 memory servers" in tls_stack.output
    assert f"grpcs://{tls_stack.server}" in tls_stack.output
    tls = ClientTls(ca_file=str(tls_stack.ca_file), server_name="localhost")
    async with HindsightClient(tls_stack.target, tls=tls) as through_nginx:
        written = await through_nginx.write(
            "acme-tls", "the user flies from Porto", tier="semantic", kind="fact"
        )
        assert (await through_nginx.get("acme-tls", written.memory.id)).content == "the user flies from Porto"
    async with HindsightClient(tls_stack.server, tls=tls) as direct:  # nginx re-encrypts: servers are TLS
        assert (await direct.get("acme-tls", written.memory.id)).id == written.memory.id
    for plaintext_target in (tls_stack.target, tls_stack.server):
        async with HindsightClient(plaintext_target, timeout_s=2) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await plain.get("acme-tls", written.memory.id)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    async with http_session(tls_stack.mcp_url) as session:  # the MCP gateway's channel: TLS
        recalled = await session.call_tool("memory_recall", {"session_id": "s", "query": "Porto flight"})
    assert not recalled.is_error, recalled
    assert "Porto" in str(recalled.structured_content)
