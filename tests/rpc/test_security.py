"""Strangers are refused and tenants never see each other: API keys, tenant isolation on every RPC,
agents' private memories, requests safe to retry, the per-tenant rate, and TLS."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hindsight.client import LONG_CALL_S, HindsightClient, memory_input
from hindsight.tls import ClientTls
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.rpc.auth import METHOD_SCOPES
from hindsight_server.rpc.ops import StatusUnavailable, fetch_status
from tests.support.certs import self_signed
from tests.support.processes import create_key, free_port, run_cli
from tests.support.rich_errors import detail

UNKNOWN_ID = "01a22b8a-0000-7000-8000-000000000000"


async def _code(call: Awaitable[Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value.code()


async def _reason(call: Awaitable[Any]) -> tuple[str, str]:
    """The status code's name and the ErrorInfo reason of a call that fails."""
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    info = detail(failed.value, error_details_pb2.ErrorInfo)
    return failed.value.code().name, info.reason if info else ""


# ------------------------------------------------------------------------------------------ API keys


@pytest.fixture(scope="module")
async def keyed_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    running = await start_server(make_settings(security__require_api_keys=True, security__api_key_cache_s=0))
    yield running
    await running.stop()


async def test_calls_need_their_tenants_key(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    key = await create_key(postgres_dsn, tenant)
    assert key["api_key"].startswith(f"hs_{key['key_id']}_")
    target = f"127.0.0.1:{keyed_server.port}"
    async with HindsightClient(target) as anonymous:
        assert await _reason(anonymous.recall(tenant, "x")) == ("UNAUTHENTICATED", "API_KEY_MISSING")
        assert await anonymous.health() == "SERVING"  # probes need no key
    async with HindsightClient(target, api_key="hs_nope_nope") as forged:
        assert await _reason(forged.recall(tenant, "x")) == ("UNAUTHENTICATED", "API_KEY_INVALID")
    async with HindsightClient(target, api_key=key["api_key"]) as owner:
        written = await owner.write(tenant, "the key works", tier="semantic", kind="fact")
        assert (await owner.get(tenant, written.memory.id)).content == "the key works"
        with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
            await owner.recall(f"{tenant}-other", "x")
        assert elsewhere.value.code() == grpc.StatusCode.PERMISSION_DENIED
        info = detail(elsewhere.value, error_details_pb2.ErrorInfo)
        assert info is not None and info.reason == "TENANT_MISMATCH"
        assert key["api_key"] not in (elsewhere.value.details() or "")

    listed = await run_cli(["tenants", "list", "--tenant", tenant, "--dsn", postgres_dsn, "--json"])
    assert [row["key_id"] for row in json.loads(listed.stdout)] == [key["key_id"]]

    assert key["api_key"] not in listed.stdout  # the secret is shown once, never again
    revoked = await run_cli(["tenants", "revoke", key["key_id"], "--dsn", postgres_dsn])
    assert revoked.code == 0, revoked.stderr
    async with HindsightClient(target, api_key=key["api_key"]) as former:
        assert await _code(former.recall(tenant, "x")) == grpc.StatusCode.UNAUTHENTICATED


async def test_ops_status_needs_an_admin_key_where_keys_are_required(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    """Ops/Status (server-wide figures) answers a key with the admin scope, and nobody else; `hindsight
    status --api-key` sends one."""
    target = f"127.0.0.1:{keyed_server.port}"
    for api_key, refused in (("", "UNAUTHENTICATED"), ("hs_nope_nope", "UNAUTHENTICATED")):
        with pytest.raises(StatusUnavailable, match=refused):
            await fetch_status(target, timeout_s=5, api_key=api_key)
    everyday = await create_key(postgres_dsn, tenant)  # read,write
    with pytest.raises(StatusUnavailable, match=r"PERMISSION_DENIED: Ops/Status needs .* admin scope"):
        await fetch_status(target, timeout_s=5, api_key=everyday["api_key"])
    key = await create_key(postgres_dsn, tenant, "--scopes", "admin")
    status = await fetch_status(target, timeout_s=5, api_key=key["api_key"])
    assert status.serving == "SERVING" and "recall" in status.figures

    shown = await run_cli(["status", "--target", target, "--json", "--api-key", key["api_key"]])
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["servers"][0]["serving"] == "SERVING"
    refused_cli = await run_cli(["status", "--target", target, "--json"])
    assert refused_cli.code != 0 and "UNAUTHENTICATED" in refused_cli.stdout + refused_cli.stderr


# ------------------------------------------------------------------------------------------ scopes


def test_every_method_needs_a_scope() -> None:
    methods = {method.name for method in pb.DESCRIPTOR.services_by_name["MemoryService"].methods}
    assert set(METHOD_SCOPES) == methods


async def _denied_for(call: Awaitable[Any]) -> str:
    """The scope a refused call names (its reason must be SCOPE_MISSING)."""
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    info = detail(failed.value, error_details_pb2.ErrorInfo)
    assert failed.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert info is not None and info.reason == "SCOPE_MISSING"
    named = re.search(r"with the (\w+) scope", failed.value.details() or "")
    assert named is not None, failed.value.details()
    return named.group(1)


async def _exported(client: HindsightClient, tenant: str) -> list[pb.ExportedMemory]:
    return [item.memory async for item in client.export(tenant) if item.HasField("memory")]


async def test_a_key_does_only_what_its_scopes_allow(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    target = f"127.0.0.1:{keyed_server.port}"
    everyday = await create_key(postgres_dsn, tenant)
    assert everyday["scopes"] == ["read", "write"] and everyday["agent_id"] == ""  # the default
    reader = await create_key(postgres_dsn, tenant, "--scopes", "read")
    porter = await create_key(postgres_dsn, tenant, "--scopes", "export,erase")
    admin = await create_key(postgres_dsn, tenant, "--scopes", "admin")
    async with HindsightClient(target, api_key=everyday["api_key"]) as agent:
        written = await agent.write(tenant, "the everyday key writes", tier="semantic", kind="fact")
        await agent.update(tenant, written.memory.id, content="and updates")
        await agent.append_turn(tenant, "s1", "a turn")
        assert await _denied_for(_exported(agent, tenant)) == "export"
        assert await _denied_for(agent.erase(tenant, whole_tenant=True)) == "erase"
        assert await _denied_for(agent.import_memories(tenant, [])) == "admin"
    async with HindsightClient(target, api_key=reader["api_key"]) as read_only:
        assert (await read_only.get(tenant, written.memory.id)).content == "and updates"
        assert (await read_only.list(tenant)).memories
        await read_only.recall(tenant, "everyday")
        await read_only.history(tenant, written.memory.id)
        await read_only.summarize(tenant, "s1")
        assert await _denied_for(read_only.write(tenant, "no", tier="semantic", kind="fact")) == "write"
        assert await _denied_for(read_only.delete(tenant, written.memory.id)) == "write"
        assert await _denied_for(read_only.append_turn(tenant, "s1", "no")) == "write"
        assert await _denied_for(read_only.end_session(tenant, "s1")) == "write"
        assert await _denied_for(read_only.confirm_pending(tenant, written.memory.id)) == "write"
    async with HindsightClient(target, api_key=porter["api_key"]) as porting:
        assert await _denied_for(porting.recall(tenant, "x")) == "read"
        exported = await _exported(porting, tenant)
        assert written.memory.id in {m.memory.id for m in exported}
        assert await _denied_for(porting.import_memories(tenant, exported)) == "admin"
        assert (await porting.erase(tenant, whole_tenant=True, reason="test")).memories == len(exported)
    async with HindsightClient(target, api_key=admin["api_key"]) as restoring:
        assert (await restoring.import_memories(tenant, exported)).imported == len(exported)
        assert await _denied_for(restoring.get(tenant, written.memory.id)) == "read"

    listed = await run_cli(["tenants", "list", "--tenant", tenant, "--dsn", postgres_dsn, "--json"])
    assert {row["key_id"]: row["scopes"] for row in json.loads(listed.stdout)} == {
        everyday["key_id"]: ["read", "write"],
        reader["key_id"]: ["read"],
        porter["key_id"]: ["erase", "export"],
        admin["key_id"]: ["admin"],
    }
    nobody = await run_cli(["tenants", "list", "--tenant", f"{tenant}-none", "--dsn", postgres_dsn])
    assert nobody.code == 0 and not nobody.stdout
    assert f"tenant '{tenant}-none' has no API keys yet" in nobody.stderr
    typo = await run_cli(["tenants", "create", tenant, "--dsn", postgres_dsn, "--scopes", "read,root"])
    assert typo.code != 0 and "--scopes: unknown scope root" in typo.stderr


# ------------------------------------------------------------------------------------------ bound agents


async def test_a_key_bound_to_an_agent_never_sees_another_agents_private_memories(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    target = f"127.0.0.1:{keyed_server.port}"
    scopes = ("--scopes", "read,write,export")
    travel = await create_key(
        postgres_dsn, tenant, "--scopes", "read,write,export,admin", "--agent", "travel"
    )
    calendar = await create_key(postgres_dsn, tenant, *scopes, "--agent", "calendar")
    service = await create_key(postgres_dsn, tenant, *scopes)  # bound to no agent: the whole tenant
    assert travel["agent_id"] == "travel"
    async with HindsightClient(target, api_key=travel["api_key"]) as own:
        # No agent_id sent: the key's agent is the writer, so the memory can be PRIVATE.
        private = await own.write(tenant, "the user's passport number is X123", tier="semantic", kind="fact",
                                  visibility="private", idempotency_key="k-private")  # fmt: skip
        shared = await own.write(tenant, "the user travels in May", tier="semantic", kind="fact")
        assert private.memory.agent_id == shared.memory.agent_id == "travel"
        assert (await own.get(tenant, private.memory.id)).id == private.memory.id
        assert {m.memory.id for m in await _exported(own, tenant)} == {private.memory.id, shared.memory.id}
        denied = await _reason(own.get(tenant, private.memory.id, agent_id="calendar"))
        assert denied == ("PERMISSION_DENIED", "AGENT_MISMATCH")
        as_another = own.write(tenant, "forged", tier="semantic", kind="fact", agent_id="calendar")
        assert await _reason(as_another) == ("PERMISSION_DENIED", "AGENT_MISMATCH")
        other_in_batch = [memory_input("forged", tier="semantic", kind="fact", agent_id="calendar")]
        assert await _reason(own.write_batch(tenant, other_in_batch)) == denied
    async with HindsightClient(target, api_key=calendar["api_key"]) as other:
        not_found = grpc.StatusCode.NOT_FOUND
        assert await _code(other.get(tenant, private.memory.id)) == not_found
        assert await _code(other.history(tenant, private.memory.id)) == not_found
        assert await _reason(other.get(tenant, private.memory.id, agent_id="travel")) == (
            "PERMISSION_DENIED",
            "AGENT_MISMATCH",
        )
        assert await _reason(other.list(tenant, agent_id="travel")) == ("PERMISSION_DENIED", "AGENT_MISMATCH")
        assert {m.id for m in (await other.list(tenant)).memories} == {shared.memory.id}
        found = await other.recall(tenant, "passport travels", min_score=0)
        assert {hit.memory.id for hit in found.hits} == {shared.memory.id}
        assert "X123" not in found.injection_text
        exported = await _exported(other, tenant)
        assert [m.memory.id for m in exported] == [shared.memory.id]
        # The first write's idempotency key does not hand its memory to another agent.
        with pytest.raises(grpc.aio.AioRpcError) as replay:
            await other.write(tenant, "anything", tier="semantic", kind="fact", idempotency_key="k-private")
        assert replay.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "X123" not in (replay.value.details() or "") and private.memory.id not in str(replay.value)
        with pytest.raises(grpc.aio.AioRpcError) as batch_replay:
            batch = [
                pb.MemoryInput(
                    content="x", tier=pb.TIER_SEMANTIC, kind=pb.KIND_FACT, idempotency_key="k-private"
                )
            ]
            await other.write_batch(tenant, batch, verbatim=True)
        assert batch_replay.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    async with HindsightClient(target, api_key=travel["api_key"]) as own:
        again = await own.write(tenant, "the user's passport number is X123", tier="semantic", kind="fact",
                                visibility="private", idempotency_key="k-private")  # fmt: skip
        assert again.memory.id == private.memory.id  # its own retry still replays
        assert await _reason(own.import_memories(tenant, exported)) == ("PERMISSION_DENIED", "AGENT_MISMATCH")
    erasing = await create_key(postgres_dsn, tenant, "--scopes", "read,erase", "--agent", "travel")
    async with HindsightClient(target, api_key=erasing["api_key"]) as bound_eraser:
        # Erase takes every agent's memories of a subject: not an agent's act, whatever its scopes.
        mismatch = ("PERMISSION_DENIED", "AGENT_MISMATCH")
        assert await _reason(bound_eraser.erase(tenant, subject="")) == mismatch
        assert await _reason(bound_eraser.erase(tenant, memory_ids=[private.memory.id])) == mismatch
    async with HindsightClient(target, api_key=service["api_key"]) as tenant_wide:
        # The service mode: a key bound to no agent names any agent, and exports everything.
        assert (await tenant_wide.get(tenant, private.memory.id, agent_id="travel")).id == private.memory.id
        assert len(await _exported(tenant_wide, tenant)) == 2


async def test_a_key_bound_to_an_agent_reaches_its_own_sessions_only(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    target = f"127.0.0.1:{keyed_server.port}"
    travel = await create_key(postgres_dsn, tenant, "--scopes", "read,write", "--agent", "travel")
    calendar = await create_key(postgres_dsn, tenant, "--scopes", "read,write", "--agent", "calendar")
    service = await create_key(postgres_dsn, tenant, "--scopes", "read,write")
    async with HindsightClient(target, api_key=travel["api_key"]) as own:
        await own.append_turn(tenant, "trip", "my passport number is X123", subject="u1")
        assert (await own.summarize(tenant, "trip")).turn_count == 1
    not_found = grpc.StatusCode.NOT_FOUND
    async with HindsightClient(target, api_key=calendar["api_key"]) as other:
        # Another agent's session reads as one that does not exist, whatever the call.
        missing = await _code(other.summarize(tenant, "no-such-session"))
        assert missing == not_found
        assert await _code(other.summarize(tenant, "trip")) == not_found
        assert await _code(other.append_turn(tenant, "trip", "and my seat is 3A", subject="u1")) == not_found
        assert await _code(other.end_session(tenant, "trip")) == not_found
        named = other.summarize(tenant, "trip", agent_id="travel")
        assert await _reason(named) == ("PERMISSION_DENIED", "AGENT_MISMATCH")
        # A session of no agent is anyone's, and becomes the first agent's to speak in it.
        async with HindsightClient(target, api_key=service["api_key"]) as tenant_wide:
            await tenant_wide.append_turn(tenant, "lobby", "hello", subject="u1")
        await other.append_turn(tenant, "lobby", "book a room on Friday", subject="u1")
    async with HindsightClient(target, api_key=travel["api_key"]) as own:
        assert await _code(own.append_turn(tenant, "lobby", "hi", subject="u1")) == not_found
        assert (await own.summarize(tenant, "trip")).turn_count == 1  # nothing of calendar's was added
        ended = await own.end_session(tenant, "trip")
        assert ended.episode.agent_id == "travel"
    async with HindsightClient(target, api_key=service["api_key"]) as tenant_wide:
        # A key bound to no agent reaches every session, and narrows itself by naming an agent.
        assert (await tenant_wide.summarize(tenant, "trip")).turn_count == 1
        assert await _code(tenant_wide.summarize(tenant, "trip", agent_id="calendar")) == not_found
        assert (await tenant_wide.summarize(tenant, "lobby", agent_id="calendar")).turn_count == 2


async def test_the_cli_sends_the_key(keyed_server: RunningServer, postgres_dsn: str, tenant: str) -> None:
    key = await create_key(postgres_dsn, tenant)
    common = ["--target", f"127.0.0.1:{keyed_server.port}", "--tenant", tenant]
    refused = await run_cli(["recall", *common, "--query", "x"])
    assert refused.code != 0 and "UNAUTHENTICATED" in refused.stderr
    allowed = await run_cli(["recall", *common, "--query", "x"], env={"HINDSIGHT_API_KEY": key["api_key"]})
    assert allowed.code == 0, allowed.stderr


# ------------------------------------------------------------------------------------------ isolation


async def test_another_tenant_sees_and_changes_nothing(client: HindsightClient, tenant: str) -> None:
    intruder = f"{tenant}-b"
    secret = await client.write(
        tenant, "用户的门禁密码是 4711", tier="semantic", kind="fact", subject="u1", session_id="s1",
        entities={"door": "A"}, intent="door_code", confidence=0.5,
    )  # fmt: skip
    await client.append_turn(tenant, "s1", "以后都给我订靠窗的位置", subject="u1")
    memory_id = secret.memory.id
    not_found = grpc.StatusCode.NOT_FOUND
    assert await _code(client.get(intruder, memory_id)) == not_found
    assert await _code(client.history(intruder, memory_id)) == not_found
    assert await _code(client.update(intruder, memory_id, content="changed")) == not_found
    assert await _code(client.delete(intruder, memory_id)) == not_found
    assert await _code(client.confirm_pending(intruder, memory_id)) == not_found
    assert await _code(client.reject_pending(intruder, memory_id)) == not_found
    assert await _code(client.summarize(intruder, "s1")) == not_found
    assert await _code(client.end_session(intruder, "s1")) == not_found
    assert not (await client.list(intruder, statuses=["active", "pending"])).memories
    found = await client.recall(
        intruder, "门禁密码 靠窗", session_id="s1", entities={"door": "A"}, explain=True, min_score=0
    )
    assert not found.hits and not found.injection_text
    assert all(not channel.memory_ids for channel in found.explanation.channels)
    # ... and the owner's memory is as it was.
    assert (await client.get(tenant, memory_id)) == secret.memory


# ------------------------------------------------------------------------------------------ agents


async def test_private_memories_are_seen_by_their_agent_only(client: HindsightClient, tenant: str) -> None:
    shared = await client.write(tenant, "the user prefers aisle seats", tier="semantic", kind="preference",
                                agent_id="travel")  # fmt: skip
    private = await client.write(tenant, "the user's aisle seat notes for travel only", tier="semantic",
                                 kind="fact", agent_id="travel", visibility="private")  # fmt: skip
    assert private.memory.visibility == pb.VISIBILITY_PRIVATE
    assert shared.memory.visibility == pb.VISIBILITY_SHARED

    async def seen_by(agent: str) -> set[str]:
        found = await client.recall(tenant, "aisle seat", agent_id=agent, min_score=0)
        listed = await client.list(tenant, agent_id=agent)
        assert {m.id for m in listed.memories} == {h.memory.id for h in found.hits}
        return {h.memory.id for h in found.hits}

    assert await seen_by("travel") == {shared.memory.id, private.memory.id}
    assert await seen_by("calendar") == {shared.memory.id}
    assert await seen_by("") == {shared.memory.id}
    assert (
        await _code(client.get(tenant, private.memory.id, agent_id="calendar")) == grpc.StatusCode.NOT_FOUND
    )
    assert (await client.get(tenant, private.memory.id, agent_id="travel")).id == private.memory.id
    with pytest.raises(grpc.aio.AioRpcError) as orphan:
        await client.write(tenant, "no owner", tier="semantic", kind="fact", visibility="private")
    assert orphan.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memory.visibility" in (orphan.value.details() or "")


# ------------------------------------------------------------------------------------------ retries


async def test_a_retried_mutation_applies_once(client: HindsightClient, tenant: str) -> None:
    written = await client.write(tenant, "v1", tier="semantic", kind="fact")
    first = await client.update(tenant, written.memory.id, content="v2", idempotency_key="edit-1")
    again = await client.update(tenant, written.memory.id, content="v2", idempotency_key="edit-1")
    assert again == first
    assert (await client.get(tenant, written.memory.id)).version == first.version == 2
    with pytest.raises(grpc.aio.AioRpcError) as reused:
        await client.update(tenant, written.memory.id, content="v3", idempotency_key="edit-1")
    assert reused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "different Update request" in (reused.value.details() or "")
    failure = detail(reused.value, error_details_pb2.PreconditionFailure)
    assert failure is not None and [v.subject for v in failure.violations] == ["idempotency_keys/edit-1"]

    await client.append_turn(tenant, "s", "I need a room on Friday")
    ended = await client.end_session(tenant, "s", idempotency_key="end-1")
    retried = await client.end_session(tenant, "s", idempotency_key="end-1")
    assert ended.episode.id and retried.episode.id == ended.episode.id

    pending = await client.write(tenant, "maybe tea", tier="semantic", kind="preference", confidence=0.4)
    confirmed = await client.confirm_pending(tenant, pending.memory.id, idempotency_key="ok-1")
    assert await client.confirm_pending(tenant, pending.memory.id, idempotency_key="ok-1") == confirmed
    deleted = await client.delete(tenant, written.memory.id, idempotency_key="del-1")
    assert await client.delete(tenant, written.memory.id, idempotency_key="del-1") == deleted


async def test_a_failed_call_frees_its_key(client: HindsightClient, tenant: str) -> None:
    assert await _code(client.delete(tenant, UNKNOWN_ID, idempotency_key="k")) == grpc.StatusCode.NOT_FOUND
    written = await client.write(tenant, "now it exists", tier="semantic", kind="fact")
    assert await _code(client.delete(tenant, UNKNOWN_ID, idempotency_key="k")) == grpc.StatusCode.NOT_FOUND
    assert (await client.delete(tenant, written.memory.id, idempotency_key="k2")).status == pb.STATUS_DELETED


# ------------------------------------------------------------------------------------------ rate


async def test_a_tenant_over_its_rate_is_told_to_slow_down(
    make_settings: Callable[..., Settings], tenant: str
) -> None:
    settings = make_settings(security__requests_per_s_per_tenant=0.01, security__request_burst_per_tenant=2)
    running = await start_server(settings)
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}") as client:
            await client.recall(tenant, "x")
            await client.recall(tenant, "x")
            with pytest.raises(grpc.aio.AioRpcError) as limited:
                await client.recall(tenant, "x")
            assert limited.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert tenant in (limited.value.details() or "")
            # When to retry, and why, for programs: at 0.01/s the next token is ~100 s away.
            retry = detail(limited.value, error_details_pb2.RetryInfo)
            assert retry is not None and 90 <= retry.retry_delay.ToTimedelta().total_seconds() <= 100
            info = detail(limited.value, error_details_pb2.ErrorInfo)
            assert info is not None and (info.reason, info.domain) == ("RATE_LIMITED", "hindsight.v1")
            await client.recall(f"{tenant}-other", "x")  # others keep their own budget
    finally:
        await running.stop()


async def test_a_spray_of_random_keys_is_told_to_wait_and_a_seen_key_goes_on(
    make_settings: Callable[..., Settings], postgres_dsn: str, tenant: str
) -> None:
    running = await start_server(
        make_settings(
            security__require_api_keys=True,
            security__api_key_cache_s=0,
            security__new_key_lookups_per_s=0.001,
            security__new_key_lookup_burst=3,
        )
    )
    try:
        key = await create_key(postgres_dsn, tenant)
        target = f"127.0.0.1:{running.port}"
        async with HindsightClient(target, api_key=key["api_key"]) as owner:
            await owner.recall(tenant, "x")  # seen: one of the 3 lookups
            reasons = []
            for attempt in range(6):
                async with HindsightClient(target, api_key=f"hs_{attempt:016x}_guess") as sprayer:
                    reasons.append(await _reason(sprayer.recall(tenant, "x")))
            assert (
                reasons
                == [("UNAUTHENTICATED", "API_KEY_INVALID")] * 2 + [("RESOURCE_EXHAUSTED", "RATE_LIMITED")] * 4
            )
            for _ in range(3):
                await owner.recall(tenant, "x")
    finally:
        await running.stop()


# ------------------------------------------------------------------------------------------ TLS


async def test_tls_when_configured(
    make_settings: Callable[..., Settings], tmp_path: Path, tenant: str
) -> None:
    cert, key = self_signed(tmp_path)
    running = await start_server(
        make_settings(security__tls_cert_file=str(cert), security__tls_key_file=str(key))
    )
    try:
        target = f"127.0.0.1:{running.port}"
        async with HindsightClient(target, tls=ClientTls(ca_file=str(cert))) as secure:
            written = await secure.write(tenant, "over TLS", tier="semantic", kind="fact")
            assert written.created
        async with HindsightClient(target, timeout_s=2) as plain:
            assert await _code(plain.get(tenant, written.memory.id)) == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop()


async def test_a_turn_key_reused_for_another_turn_is_refused(client: HindsightClient, tenant: str) -> None:
    first = await client.append_turn(tenant, "s", "book room A", idempotency_key="turn-1")
    assert (await client.append_turn(tenant, "s", "book room A", idempotency_key="turn-1")).turn == first.turn
    with pytest.raises(grpc.aio.AioRpcError) as reused:
        await client.append_turn(tenant, "s", "book room B", idempotency_key="turn-1")
    assert reused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "idempotency_key" in (reused.value.details() or "")


async def test_an_abandoned_claim_does_not_block_its_key(
    client: HindsightClient, postgres_dsn: str, tenant: str
) -> None:
    """A server that died (or lost the database) after claiming a key leaves it unanswered: past the
    claim's lease (server.idempotency_claim_timeout_s, 10 min) a retry runs instead of being told
    forever that the first call is still running. Within it, even past the longest deadline the shared
    client gives a call (Erase's), a retry is told to wait: it never starts a second run of a live one."""
    written = await client.write(tenant, "v1", tier="semantic", kind="fact")
    # The request's fingerprint, as the server takes it: the request without its key (the shared client
    # sends the mask in both its forms).
    same_update = pb.UpdateRequest(
        tenant_id=tenant,
        id=written.memory.id,
        memory=pb.MemoryInput(content="v2"),
        update_mask=field_mask_pb2.FieldMask(paths=["content"]),
        deprecated_update_mask=["content"],
    )
    fingerprint = hashlib.sha256(same_update.SerializeToString(deterministic=True)).digest()
    connection = await asyncpg.connect(postgres_dsn)
    try:
        claims = (
            (timedelta(seconds=1), "fresh"),
            (timedelta(seconds=LONG_CALL_S + 30), "running long"),
            (timedelta(minutes=11), "abandoned"),
        )
        for age, key in claims:
            await connection.execute(
                """INSERT INTO request_replies (tenant_id, method, key, fingerprint, created_at)
                   VALUES ($1, 'Update', $2, $3, now() - $4::interval)""",
                tenant,
                key,
                fingerprint,
                age,
            )
    finally:
        await connection.close()
    for key in ("fresh", "running long"):
        with pytest.raises(grpc.aio.AioRpcError) as running:
            await client.update(tenant, written.memory.id, content="v2", idempotency_key=key)
        assert running.value.code() == grpc.StatusCode.ABORTED
    updated = await client.update(tenant, written.memory.id, content="v2", idempotency_key="abandoned")
    assert updated.content == "v2"


async def test_export_import_and_erase_need_their_tenants_key(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    owner_key = await create_key(postgres_dsn, tenant, "--scopes", "read,write,export,erase,admin")
    other_key = await create_key(postgres_dsn, f"{tenant}-other")
    target = f"127.0.0.1:{keyed_server.port}"
    async with HindsightClient(target, api_key=owner_key["api_key"]) as owner:
        written = await owner.write(tenant, "the owner's memory", tier="semantic", kind="fact")
        exported = [item.memory async for item in owner.export(tenant) if item.HasField("memory")]
    assert [m.memory.id for m in exported] == [written.memory.id]
    async with HindsightClient(target, api_key=other_key["api_key"]) as other:
        with pytest.raises(grpc.aio.AioRpcError) as export:
            _ = [item async for item in other.export(tenant)]
        assert await _code(other.import_memories(tenant, exported)) == grpc.StatusCode.PERMISSION_DENIED
        assert await _code(other.erase(tenant, whole_tenant=True)) == grpc.StatusCode.PERMISSION_DENIED
    assert export.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with HindsightClient(target) as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
            _ = [item async for item in anonymous.export(tenant)]
    assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with HindsightClient(target, api_key=owner_key["api_key"]) as owner:
        assert (await owner.get(tenant, written.memory.id)).content == "the owner's memory"
        erased = await owner.erase(tenant, whole_tenant=True, reason="test")
    assert erased.memories == 1
    connection = await asyncpg.connect(postgres_dsn)
    try:
        by = await connection.fetchval("SELECT requested_by FROM erasures WHERE tenant_id = $1", tenant)
    finally:
        await connection.close()
    assert by == f"api key {owner_key['key_id']}"  # who erased, in the audit record


async def test_the_health_services_watch_stays_open_where_keys_are_required(
    keyed_server: RunningServer,
) -> None:
    """Health/Watch is the one streaming method besides Export: probes need no key for it either."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{keyed_server.port}") as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        first = await anext(aiter(watch))
        watch.cancel()
    assert first.status == health_pb2.HealthCheckResponse.SERVING


async def test_ops_status_and_the_log_show_no_replica_password(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    """A password given as a query parameter (asyncpg takes `?password=`) is no more shown than one in
    the userinfo: not in Ops/Status, not in the log."""
    port = free_port()  # nothing listens there: the replica is left out, and says so in the log
    replica = f"postgresql://reader:hunter1@127.0.0.1:{port}/db?sslmode=disable&password=hunter2&sslpassword=hunter3"
    running = await start_server(make_settings(database__replica_dsns=(replica,)))
    try:
        status = await fetch_status(f"127.0.0.1:{running.port}", timeout_s=5)
    finally:
        await running.stop()
    shown = json.dumps(status.figures)
    assert f"postgresql://reader@127.0.0.1:{port}/db?sslmode=disable" in shown
    assert "hunter" not in shown and "hunter" not in caplog.text
