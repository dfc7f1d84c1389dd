"""No secret and no memory content in the logs at INFO: every RPC with distinctive content and an API key,
refusals included, then the log is searched for both. In process (every logger, through the root) and
in the output of a real `hindsight serve`."""

from __future__ import annotations

import contextlib
import logging
import random
import uuid
from collections.abc import Awaitable, Callable

import grpc
import pytest

from hindsight.client import HindsightClient, memory_input
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.support.processes import Background, create_key


async def _every_call(target: str, tenant: str, key: str, secret: str) -> None:
    """Every RPC, carrying the secret in its text fields, and the refusals that quote what they got."""
    async with HindsightClient(target, api_key=key, timeout_s=10) as client:
        written = await client.write(
            tenant, f"the door code is {secret}", tier="semantic", kind="fact", subject="u1", session_id="s1",
            intent="door_code", entities={"code": secret}, confidence=0.5,
        )  # fmt: skip
        memory_id = written.memory.id
        batch = [memory_input(f"{secret} batch {n}", tier="episodic", kind="event") for n in range(3)]
        await client.write_batch(tenant, batch)
        await client.get(tenant, memory_id)
        await client.list(tenant)
        await client.recall(tenant, f"door code {secret}", explain=True, min_score=0)
        await client.update(tenant, memory_id, content=f"the door code is now {secret}x")
        await client.history(tenant, memory_id)
        await client.confirm_pending(tenant, memory_id)
        await client.append_turn(tenant, "s1", f"remember: my locker code is {secret}", subject="u1")
        await client.summarize(tenant, "s1")
        await client.end_session(tenant, "s1", reason="task_done")
        await client.delete(tenant, memory_id)
        # Content past PostgreSQL's index-row limit (once INTERNAL, tests/fuzz/test_long_content.py).
        with contextlib.suppress(grpc.aio.AioRpcError):
            await client.write(tenant, f"{secret} {_incompressible()}", tier="episodic", kind="event")
        for refused, code in (
            (client.recall(tenant, f"{secret}", profile=secret), grpc.StatusCode.INVALID_ARGUMENT),
            # The key is another tenant's.
            (client.recall(f"{tenant}-other", secret), grpc.StatusCode.PERMISSION_DENIED),
            (
                client.write(tenant, secret * 2_000, tier="semantic", kind="fact"),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await refused
            assert raised.value.code() == code
    async with HindsightClient(target, api_key=f"hs_{secret}_{secret}", timeout_s=10) as forged:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await forged.recall(tenant, secret)
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _incompressible() -> str:
    rnd = random.Random(7)
    return "".join(chr(rnd.randint(0x4E00, 0x9FFF)) for _ in range(1_500))


def _leaks(log: str, secret: str, key: str) -> list[str]:
    # A key is hs_<id>_<secret>, and its secret is base64url: it may hold "_" itself, so the secret is
    # all after the second "_" (its last "_"-piece can be one letter, found in any line).
    key_secret = key.split("_", 2)[2]
    return [line for line in log.splitlines() if secret in line or key in line or key_secret in line]


async def test_nothing_secret_in_the_log_of_a_server_in_process(
    make_settings: Callable[..., Settings], postgres_dsn: str, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"zq{uuid.uuid4().hex[:10]}"
    key = (await create_key(postgres_dsn, tenant))["api_key"]
    caplog.set_level(logging.INFO)  # the root: every logger of the server, the libraries' too
    running = await start_server(make_settings(security__require_api_keys=True, security__api_key_cache_s=0))
    try:
        await _every_call(f"127.0.0.1:{running.port}", tenant, key, secret)
    finally:
        await running.stop()
    # The server's loggers reach the capture (nothing swallows them): a probe through one of them.
    logging.getLogger("hindsight_server.rpc.errors").info("probe")
    assert "probe" in caplog.text
    assert not _leaks(caplog.text, secret, key)


@pytest.mark.timeout(90)
async def test_nothing_secret_in_the_output_of_hindsight_serve(
    fresh_database: Callable[[], Awaitable[str]], tenant: str
) -> None:
    dsn = await fresh_database()
    secret = f"zq{uuid.uuid4().hex[:10]}"
    env = {
        "HINDSIGHT_DATABASE__DSN": dsn,
        "HINDSIGHT_LOG_LEVEL": "INFO",
        "HINDSIGHT_SECURITY__API_KEY_CACHE_S": "0",
    }
    server = Background(["serve", "--port", "0"], env)
    await server.start()
    try:
        port = int((await server.wait_for(r"listening on 127\.0\.0\.1:(\d+)")).group(1))
        key = (await create_key(dsn, tenant))["api_key"]
        await _every_call(f"127.0.0.1:{port}", tenant, key, secret)
    finally:
        assert await server.stop() == 0
    assert "listening on" in server.output  # INFO lines are there
    assert not _leaks(server.output, secret, key), server.output
