"""The optional LLM summarizer against a local OpenAI-compatible endpoint, and the fallback to the rules
when the endpoint is down. No model can run here, so the endpoint is a small local HTTP server speaking
the chat-completions protocol (the one third party these tests stand in for)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.support.processes import free_port


@pytest.fixture(scope="module")
async def chat_endpoint() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A chat-completions endpoint that words the summary from the reference it is sent."""
    received: list[dict[str, Any]] = []

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        received.append(body)
        reference = body["messages"][-1]["content"].split("\n")[0].removeprefix("Reference: ")
        return JSONResponse(
            {"choices": [{"message": {"role": "assistant", "content": f"[llm] {reference}"}}]}
        )

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    # Bound and listening before serving: calls made meanwhile wait in the backlog, no start-up race.
    listening = socket.create_server(("127.0.0.1", 0))
    task = asyncio.create_task(server.serve(sockets=[listening]))
    yield f"http://127.0.0.1:{listening.getsockname()[1]}/v1", received
    server.should_exit = True
    await task


async def test_the_llm_words_the_summary_the_rules_settled(
    make_settings: Callable[..., Settings], chat_endpoint: tuple[str, list[dict[str, Any]]], tenant: str
) -> None:
    url, received = chat_endpoint
    running = await start_server(make_settings(sessions__llm_url=url, sessions__llm_model="local"))
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}") as client:
            said = await client.append_turn(tenant, "s", "我要订下周三下午的会议室, 10个人, A栋")
            assert said.summary.summarizer == "llm"
            assert said.summary.text.startswith("[llm] 目标：订会议室")
            assert said.summary.confirmed["people"] == 10  # the structure still comes from the rules
            assert received[-1]["model"] == "local"
            assert "user: 我要订下周三下午的会议室" in received[-1]["messages"][-1]["content"]
            assert (await client.summarize(tenant, "s")).summarizer == "llm"
    finally:
        await running.stop()


async def test_an_unreachable_llm_falls_back_to_the_rules(
    make_settings: Callable[..., Settings], tenant: str
) -> None:
    settings = make_settings(
        sessions__llm_url=f"http://127.0.0.1:{free_port()}/v1", sessions__llm_timeout_s=0.5
    )
    running = await start_server(settings)
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}") as client:
            said = await client.append_turn(
                tenant, "s", "I want to book a meeting room next Wednesday for 10 people"
            )
            assert said.summary_refreshed
            assert said.summary.summarizer == "rules"
            assert said.summary.text.startswith("Goal: book a meeting room")
    finally:
        await running.stop()
