"""With a real Triton tier: the query embedding is a stage of its own (a cache miss, then a hit), each
inference call a client span under it (model, batch size), and the vector channel is traced too."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from embedder.triton import TritonServer
from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.telemetry.conftest import Telemetry, context_of, ended, number, spans_of_trace, started


@pytest.fixture(scope="module")
async def tier_server(
    otel: Telemetry, make_settings: Callable[..., Settings], triton_server: TritonServer
) -> AsyncIterator[RunningServer]:
    running = await start_server(
        make_settings(
            inference__url=triton_server.grpc_url,
            inference__english_model="",  # one model: the spans below are the multilingual model's
            inference__inline_budget_s=2.0,  # the first calls warm the model on 2 busy cores
            inference__query_timeout_s=2.0,
        )
    )
    yield running
    await running.stop()


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == context_of(parent).span_id]


async def _recall_spans(
    otel: Telemetry, client: HindsightClient, tenant: str, query: str
) -> list[ReadableSpan]:
    otel.spans.clear()
    await client.recall(tenant, query)
    return await spans_of_trace(otel, lambda spans: any(s.name == "recall" for s in spans))


async def test_embedding_and_inference_calls_are_traced(otel: Telemetry, tier_server: RunningServer) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    query = f"which seat does the user like {uuid.uuid4().hex[:6]}"
    async with HindsightClient(f"127.0.0.1:{tier_server.port}", timeout_s=20) as client:
        await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
        first = await _recall_spans(otel, client, tenant, query)
        second = await _recall_spans(otel, client, tenant, query)

    (embed,) = [s for s in first if s.name == "recall.embed"]
    assert embed.attributes is not None and embed.attributes["hindsight.cache_hit"] is False
    # The query goes to the model's query twin (its own queue, never behind document batches).
    (infer,) = [s for s in _children(first, embed) if s.name == "triton infer embed_query"]
    assert infer.kind is SpanKind.CLIENT
    assert infer.attributes is not None
    assert infer.attributes["hindsight.inference.model"] == "embed_query"
    assert infer.attributes["hindsight.inference.batch_size"] == 1
    assert started(embed) <= started(infer) <= ended(infer) <= ended(embed)
    (vector,) = [s for s in first if s.name == "recall.channel.vector"]
    assert number(vector.attributes, "hindsight.rows") >= 1
    assert any(
        s.attributes and s.attributes.get("db.system.name") == "postgresql" for s in _children(first, vector)
    )

    (cached,) = [s for s in second if s.name == "recall.embed"]
    assert cached.attributes is not None and cached.attributes["hindsight.cache_hit"] is True
    assert _children(second, cached) == []  # answered from the cache: no inference call

    assert tier_server.status is not None
    cache = tier_server.status.snapshot()["query_cache"]["multilingual"]
    assert cache["hits"] >= 1 and cache["misses"] >= 1 and cache["size"] >= 1
