"""Each bearer token acts as its own agent and, when bound to a subject, for that subject only: the
model's `subject` argument cannot pick another, and memory_forget erases only the bound subject's
memories. Static tokens and an authorization server's claims alike, through the SDK's HTTP client
against a gateway and a memory server started for the test."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import httpx2
import pytest
from mcp import ClientSession

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from hindsight.client import HindsightClient
from tests.gateway.test_forget import _ok, _text
from tests.gateway.test_oauth import CLIENT_ID, CLIENT_SECRET, authorization_server
from tests.support.mcp_sessions import INITIALIZE, INITIALIZE_HEADERS, http_gateway, http_session
from tests.support.processes import free_port, free_ports


async def _initialize_status(url: str, token: str) -> int:
    async with httpx2.AsyncClient(timeout=10) as http:
        headers = {**INITIALIZE_HEADERS, "Authorization": f"Bearer {token}"}
        return (await http.post(url, json=INITIALIZE, headers=headers)).status_code


async def _refused(session: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    return _text(result)


async def _recalled(session: ClientSession, query: str, **more: Any) -> set[str]:
    found = await _ok(
        session, "memory_recall", {"session_id": "s-recall", "query": query, "top_k": 50, **more}
    )
    return {hit["id"] for hit in found["hits"]}


async def _seed(client: HindsightClient, tenant: str) -> tuple[str, str]:
    """One memory about alice, one about bob, written by another service; their ids."""
    alice = await client.write(tenant, "alice's flat is at 12 Oak Street", tier="semantic", kind="fact",
                               subject="alice")  # fmt: skip
    bob = await client.write(
        tenant, "bob's flat is at 7 Elm Road", tier="semantic", kind="fact", subject="bob"
    )
    return alice.memory.id, bob.memory.id


async def _confined_to_alice(session: ClientSession, client: HindsightClient, tenant: str) -> None:
    """What a token bound to subject alice may and may not do, with memories of alice and bob."""
    start = (await _ok(session, "memory_changes", {"wait_s": 0.1}))["next_cursor"]
    alice_id, bob_id = await _seed(client, tenant)
    # The change feed: alice's changes only, whatever the model asks for.
    changed = await _ok(session, "memory_changes", {"cursor": start, "wait_s": 0.5})
    assert [(c["memory_id"], c["subject"]) for c in changed["changes"]] == [(alice_id, "alice")]
    assert "acts for subject 'alice' only" in await _refused(
        session, "memory_changes", {"cursor": start, "subject": "bob"}
    )
    assert await _recalled(session, "flat street road") == {alice_id}
    assert "acts for subject 'alice' only" in await _refused(
        session, "memory_recall", {"session_id": "s", "query": "flat", "subject": "bob"}
    )
    assert "subject" in await _refused(
        session,
        "memory_write",
        {"session_id": "s", "memory_type": "semantic", "summary": "x", "subject": "bob"},
    )
    written = await _ok(session, "memory_write", {"session_id": "s", "memory_type": "semantic",
                                                 "summary": "alice prefers the window seat"})  # fmt: skip
    assert (await client.get(tenant, written["id"])).subject == "alice"
    offered = await _ok(session, "memory_forget", {"query": "bob's flat at 7 Elm Road"})
    assert bob_id not in {candidate["id"] for candidate in offered["candidates"]}
    # bob's id, alone or beside alice's: refused, nothing erased; an unknown id reads the same.
    unknown = str(uuid.uuid4())
    for ids in ([bob_id], [alice_id, bob_id], [unknown]):
        refusal = await _refused(
            session, "memory_forget", {"query": "flat", "confirm": True, "memory_ids": ids}
        )
        assert "not memories of this token's subject; nothing was erased" in refusal
    assert (await client.get(tenant, bob_id)).content == "bob's flat is at 7 Elm Road"
    assert (await client.get(tenant, alice_id)).id == alice_id
    erased = await _ok(session, "memory_forget", {"query": "flat", "confirm": True, "memory_ids": [alice_id]})
    assert erased["confirmed"] is True
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await client.get(tenant, alice_id)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_static_token_bound_to_a_subject_cannot_reach_another(
    memory_target: str, client: HindsightClient, tenant: str
) -> None:
    alice_token, open_token = f"alice-{uuid.uuid4().hex}", f"open-{uuid.uuid4().hex}"
    settings = load_gateway_settings(
        port=0,
        targets=[memory_target],
        tokens={
            hash_token(alice_token): {"tenant": tenant, "agent_id": "alice-assistant", "subject": "alice"},
            hash_token(open_token): tenant,  # the plain form: any subject, its own agent
        },
    )
    async with http_gateway(settings) as url:
        async with http_session(url, alice_token) as session:
            await _confined_to_alice(session, client, tenant)
        async with http_session(url, open_token) as session:
            carol = {
                "session_id": "s",
                "memory_type": "semantic",
                "summary": "carol likes tea",
                "subject": "carol",
            }
            written = await _ok(session, "memory_write", carol)
            assert {"carol"} <= {m.subject async for m in client.list_all(tenant)}
            assert await _recalled(session, "flat street road")  # bob's, unconfined
    by_id = {m.id: m async for m in client.list_all(tenant)}
    assert by_id[written["id"]].agent_id == f"token-{hash_token(open_token)[:16]}"
    assert {m.agent_id for m in by_id.values() if m.subject == "alice"} == {"alice-assistant"}


async def test_an_authorization_servers_claims_bind_the_agent_and_subject(
    memory_target: str, client: HindsightClient, tenant: str
) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    issued = {"active": True, "aud": resource, "tenant": tenant, "client_id": "app-1"}
    claims = {
        "alice": {**issued, "agent": "alice-assistant", "end_user": "alice"},
        "unbound": issued,  # names no subject while confinement is configured: refused
    }
    async with authorization_server(claims) as (issuer, _):
        settings = load_gateway_settings(
            port=port,
            targets=[memory_target],
            resource_url=resource,
            authorization_servers=issuer,
            introspection_url=f"{issuer}/introspect",
            introspection_client_id=CLIENT_ID,
            introspection_client_secret=CLIENT_SECRET,
            agent_claim="agent",
            subject_claim="end_user",
        )
        async with http_gateway(settings) as url:
            async with http_session(url, "alice") as session:
                await _confined_to_alice(session, client, tenant)
            assert await _initialize_status(url, "unbound") == 401
    assert {m.agent_id async for m in client.list_all(tenant) if m.subject == "alice"} == {"alice-assistant"}


async def test_an_introspection_outage_is_not_remembered(memory_target: str, tenant: str) -> None:
    """While the authorization server is down a token is refused; once it is back the next request
    is verified, not refused from a cache for a minute."""
    port, issuer_port = free_ports(2)
    resource = f"http://127.0.0.1:{port}/mcp"
    settings = load_gateway_settings(
        port=port,
        targets=[memory_target],
        resource_url=resource,
        authorization_servers=f"http://127.0.0.1:{issuer_port}",
        introspection_url=f"http://127.0.0.1:{issuer_port}/introspect",
        introspection_client_id=CLIENT_ID,
        introspection_client_secret=CLIENT_SECRET,
    )
    claims = {"good": {"active": True, "aud": resource, "tenant": tenant}}
    async with http_gateway(settings) as url:
        assert await _initialize_status(url, "good") == 401
        async with (
            authorization_server(claims, port=issuer_port) as (_, introspected),
            http_session(url, "good") as session,
        ):
            await _ok(session, "memory_recall", {"session_id": "s", "query": "anything"})
    assert introspected.count("good") == 1


async def test_a_spray_of_new_tokens_reaches_the_authorization_server_only_within_its_bound(
    memory_target: str, tenant: str
) -> None:
    """Random tokens cost introspections up to the bound, then 503 with Retry-After (not 401: the
    gateway has not decided); a token verified before goes on working through the spray."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    claims = {"good": {"active": True, "aud": resource, "tenant": tenant}}
    async with authorization_server(claims) as (issuer, introspected):
        settings = load_gateway_settings(
            port=port,
            targets=[memory_target],
            resource_url=resource,
            authorization_servers=issuer,
            introspection_url=f"{issuer}/introspect",
            introspection_client_id=CLIENT_ID,
            introspection_client_secret=CLIENT_SECRET,
            new_token_introspections_per_s=0.001,
            new_token_introspection_burst=3,
        )
        async with http_gateway(settings) as url:
            assert await _initialize_status(url, "good") == 200
            async with httpx2.AsyncClient(timeout=10) as http:
                answers = []
                for attempt in range(6):
                    headers = {**INITIALIZE_HEADERS, "Authorization": f"Bearer sprayed-{attempt}"}
                    answers.append(await http.post(url, json=INITIALIZE, headers=headers))
            async with http_session(url, "good") as session:
                await _ok(session, "memory_recall", {"session_id": "s", "query": "anything"})
    assert [answer.status_code for answer in answers] == [401, 401, 503, 503, 503, 503]
    busy = answers[-1]
    assert int(busy.headers["retry-after"]) >= 1
    assert busy.json()["error"] == "temporarily_unavailable"
    assert introspected == ["good", "sprayed-0", "sprayed-1"]
