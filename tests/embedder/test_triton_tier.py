"""The inference tier end to end: a real tritonserver (session fixture) through the async clients."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from embedder.client import CallRecord, TritonEmbedder, TritonReranker, runs_on_gpu
from embedder.errors import InferenceBusy, InferenceUnavailable
from embedder.repository import EmbedModelOptions, RepositoryOptions, build_repository
from embedder.triton import TritonOptions, TritonPorts, TritonServer, TritonStartError
from tests.fixtures.triton import TEST_MAX_BATCH, TEST_MAX_CHARS, TEST_PAIR_BATCH
from tests.support.eventually import eventually

TIMEOUT_S = 10.0
PAIRS = [  # (Chinese, its English translation)
    ("用户偏好CSV格式导出。", "The user prefers exporting in CSV format."),
    ("上周五我们讨论了季度预算。", "Last Friday we discussed the quarterly budget."),
    ("我对花生过敏。", "I am allergic to peanuts."),
    ("飞往北京的航班早上八点起飞。", "The flight to Beijing departs at eight in the morning."),
]
UNRELATED = "Kubernetes schedules containers onto nodes in a cluster."


@pytest.fixture
def calls() -> list[CallRecord]:
    return []


@pytest.fixture
async def embedder(triton_server: TritonServer, calls: list[CallRecord]) -> AsyncIterator[TritonEmbedder]:
    async with TritonEmbedder(triton_server.grpc_url, on_call=calls.append) as client:
        yield client


@pytest.fixture
async def reranker(triton_server: TritonServer) -> AsyncIterator[TritonReranker]:
    async with TritonReranker(triton_server.grpc_url) as client:
        yield client


def infers(calls: list[CallRecord]) -> list[CallRecord]:
    return [call for call in calls if call.operation == "infer"]


async def test_dimension_comes_from_the_model_metadata(embedder: TritonEmbedder) -> None:
    assert await embedder.connect(timeout_s=TIMEOUT_S) == 512
    assert embedder.dimension == 512


async def test_chinese_and_english_share_one_space(embedder: TritonEmbedder) -> None:
    texts = [text for pair in PAIRS for text in pair] + [UNRELATED]
    result = await embedder.embed(texts, timeout_s=TIMEOUT_S)
    assert result.vectors.shape == (len(texts), 512) and result.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)
    assert not result.truncated.any()
    unrelated = result.vectors[-1]
    for i in range(len(PAIRS)):
        zh, en = result.vectors[2 * i], result.vectors[2 * i + 1]
        assert zh @ en > max(zh @ unrelated, en @ unrelated) + 0.1, PAIRS[i]
        others = [result.vectors[2 * j + 1] for j in range(len(PAIRS)) if j != i]
        assert zh @ en > max(zh @ other for other in others), PAIRS[i]


async def test_large_inputs_are_split_into_max_batch_requests(
    embedder: TritonEmbedder, calls: list[CallRecord]
) -> None:
    texts = [f"memory number {i} about {PAIRS[i % 4][1]}" for i in range(2 * TEST_MAX_BATCH + 3)]
    result = await embedder.embed(texts, timeout_s=TIMEOUT_S)
    assert result.vectors.shape == (len(texts), 512)
    # The chunks are sent in parallel, so their calls complete in any order.
    assert sorted(call.items for call in infers(calls)) == [3, TEST_MAX_BATCH, TEST_MAX_BATCH]
    alone = await embedder.embed([texts[-1], texts[0]], timeout_s=TIMEOUT_S)
    # batch_invariant (as the fixture configures it): a text's vector does not depend on its batch.
    np.testing.assert_allclose(alone.vectors, result.vectors[[-1, 0]], atol=1e-6)


async def test_over_long_texts_are_truncated_and_flagged(embedder: TritonEmbedder) -> None:
    texts = [
        "长" * (TEST_MAX_CHARS + 1),
        "长" * TEST_MAX_CHARS,
        "word " * TEST_MAX_CHARS,
        "x" * TEST_MAX_CHARS,
        "",
    ]
    result = await embedder.embed(texts, timeout_s=TIMEOUT_S)
    assert result.truncated.tolist() == [True, False, True, False, False]
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)
    # Cut on a character boundary: the over-long text became exactly the one at the limit.
    np.testing.assert_allclose(result.vectors[0], result.vectors[1], atol=1e-6)


async def test_repeated_query_is_served_from_the_cache(
    embedder: TritonEmbedder, calls: list[CallRecord]
) -> None:
    first = await embedder.embed_query(PAIRS[0][0], timeout_s=TIMEOUT_S)
    again = await embedder.embed_query(PAIRS[0][0], timeout_s=TIMEOUT_S)
    assert again.vector is first.vector and len(infers(calls)) == 1
    assert again.cached and not first.cached
    assert not first.vector.flags.writeable
    await embedder.embed_query(PAIRS[1][0], timeout_s=TIMEOUT_S)
    assert len(infers(calls)) == 2


async def test_too_short_a_deadline_raises_busy(embedder: TritonEmbedder, reranker: TritonReranker) -> None:
    await embedder.connect(timeout_s=TIMEOUT_S)
    with pytest.raises(InferenceBusy, match="no answer within"):
        await embedder.embed(["a sentence to embed"] * TEST_MAX_BATCH, timeout_s=1e-4)
    with pytest.raises(InferenceBusy, match="no answer within"):
        await reranker.rerank("query", ["passage"] * 40, timeout_s=1e-4)


async def test_an_abandoned_inference_runs_to_its_answer_uncancelled(
    triton_server: TritonServer, embedder: TritonEmbedder, reranker: TritonReranker
) -> None:
    """The tier's tritonserver can crash when a client cancels an RPC it is answering: a deadline that
    passes, or a waiter cancelled, ends the wait and never the RPC."""
    await embedder.connect(timeout_s=TIMEOUT_S)
    cancelled_before = await _request_failures(triton_server, "CANCELED")
    long_texts = ["a sentence to embed, long enough to keep the model busy a while " * 6] * TEST_MAX_BATCH
    with pytest.raises(TimeoutError):  # the waiter is cancelled
        await asyncio.wait_for(embedder.embed(long_texts, timeout_s=TIMEOUT_S), 0.005)
    assert embedder.abandoned == 1
    await eventually(lambda: embedder.abandoned == 0)
    with pytest.raises(InferenceBusy):
        await embedder.embed(long_texts, timeout_s=1e-4)
    with pytest.raises(InferenceBusy):
        await reranker.rerank("query", ["passage"] * 40, timeout_s=1e-4)
    assert (embedder.abandoned, reranker.abandoned) == (1, 1)
    await eventually(lambda: embedder.abandoned == 0 and reranker.abandoned == 0)
    assert await _request_failures(triton_server, "CANCELED") == cancelled_before


async def test_a_request_still_queued_past_its_deadline_is_dropped_unrun(
    triton_server: TritonServer, embedder: TritonEmbedder
) -> None:
    await embedder.connect(timeout_s=TIMEOUT_S)
    rejected_before = await _request_failures(triton_server, "REJECTED")
    # Two full batches hold the model's one instance; the late request queues behind them.
    full_batch = ["x " * TEST_MAX_CHARS] * TEST_MAX_BATCH
    busy = asyncio.gather(*(embedder.embed(full_batch, timeout_s=TIMEOUT_S) for _ in range(2)))
    await asyncio.sleep(0.05)
    with pytest.raises(InferenceBusy):
        await embedder.embed(["queued too long"], timeout_s=0.002)
    await busy
    await eventually(lambda: embedder.abandoned == 0)
    assert await _request_failures(triton_server, "REJECTED") == rejected_before + 1


async def _request_failures(server: TritonServer, reason: str, model: str = "embed") -> int:
    """Triton's count of the model's failed requests for `reason` (CANCELED, REJECTED), from its metrics."""
    url = f"http://127.0.0.1:{server.options.ports.metrics}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    prefix = "nv_inference_request_failure{"
    for line in text.splitlines():
        if line.startswith(prefix) and f'model="{model}"' in line and f'reason="{reason}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no {reason} failure count for {model} in Triton's metrics")


async def test_rerank_scores_each_pair_whatever_the_order_of_its_batch(reranker: TritonReranker) -> None:
    query = "user prefers csv export"
    passages = [
        f"passage {i}: {PAIRS[i % 4][i % 2]} {'data ' * (i % 5)}" for i in range(2 * TEST_PAIR_BATCH + 4)
    ]
    scores = await reranker.rerank(query, passages, timeout_s=TIMEOUT_S)
    assert len(scores) == len(passages) and all(isinstance(s, float) for s in scores)
    assert len(set(scores)) > 1
    # The same passages in another order: the same slices, the same scores.
    reversed_scores = await reranker.rerank(query, passages[::-1], timeout_s=TIMEOUT_S)
    np.testing.assert_allclose(reversed_scores[::-1], scores, atol=1e-5)
    # Alone, a pair is quantized with scales of its own (int8): a few tenths of a logit, where a match
    # and an unrelated passage lie ~10 apart.
    single = await reranker.rerank(query, [passages[0]], timeout_s=TIMEOUT_S)
    np.testing.assert_allclose(single, scores[:1], atol=1.0)
    assert await reranker.rerank(query, [], timeout_s=TIMEOUT_S) == []


async def test_the_tier_reports_which_models_it_has(
    triton_server: TritonServer, reranker: TritonReranker
) -> None:
    assert await reranker.deployed() and await reranker.ready()
    async with TritonReranker(triton_server.grpc_url, model="absent") as absent:
        assert not await absent.deployed()
        assert not await absent.ready()
        with pytest.raises(InferenceUnavailable):
            await absent.rerank("q", ["p"], timeout_s=TIMEOUT_S)


def test_a_model_that_fails_to_load_reports_the_log_tail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx graph")
    build_repository(tmp_path / "models", RepositoryOptions(EmbedModelOptions(onnx_path=broken)))
    server = TritonServer(TritonOptions(tmp_path / "models", ports=TritonPorts.free(), ready_timeout_s=30))
    with pytest.raises(TritonStartError, match=r"(?s)exited with code.*embed"):
        server.start()
    assert not server.running


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_stop_makes_calls_unavailable_and_restart_recovers(
    triton_server: TritonServer, embedder: TritonEmbedder, reranker: TritonReranker
) -> None:
    await embedder.connect(timeout_s=TIMEOUT_S)
    pgid = triton_server.pid
    assert pgid is not None
    try:
        await asyncio.to_thread(triton_server.stop)
        assert not group_alive(pgid), "tritonserver or a python stub outlived stop()"
        with pytest.raises(InferenceUnavailable):
            await embedder.embed(["after stop"], timeout_s=TIMEOUT_S)
        with pytest.raises(InferenceUnavailable):
            await reranker.rerank("q", ["p"], timeout_s=TIMEOUT_S)
        assert not await embedder.ready()
    finally:
        triton_server.start()  # the same ports
    await eventually(embedder.ready, timeout_s=10.0)
    result = await embedder.embed(["after restart"], timeout_s=TIMEOUT_S)
    assert result.vectors.shape == (1, 512)
    assert await reranker.rerank("q", ["p"], timeout_s=TIMEOUT_S)


def _stub_niceness(server_pid: int, model: str) -> set[int]:
    """The CPU niceness of every thread of `model`'s python-backend stubs (children of the server)."""
    found: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
            if parent != server_pid or not any(arg.endswith(f"/{model}/1/model.py".encode()) for arg in argv):
                continue
            for thread in os.listdir(f"/proc/{pid}/task"):
                found.add(os.getpriority(os.PRIO_PROCESS, int(thread)))
        except (FileNotFoundError, ProcessLookupError):  # a process that ended while we looked
            continue
    return found


def test_document_models_run_at_the_bulk_niceness_and_query_twins_do_not(triton_server: TritonServer) -> None:
    assert triton_server.pid is not None
    assert _stub_niceness(triton_server.pid, "embed") == {10}
    assert _stub_niceness(triton_server.pid, "embed_query") == {0}


async def test_the_tier_says_where_the_cross_encoder_runs(reranker: TritonReranker) -> None:
    """Read from the model's configuration: this tier's instances are KIND_CPU, so recall does not rerank
    by default here (domain/rerank.py)."""
    assert await reranker.on_gpu(timeout_s=5) is False


@pytest.mark.parametrize(
    ("config", "on_gpu"),
    [
        ({"config": {"instance_group": [{"kind": "KIND_CPU", "count": 1}]}}, False),
        ({"config": {"instance_group": [{"kind": "KIND_GPU", "count": 1, "gpus": [0]}]}}, True),
        ({"config": {"instance_group": [{"kind": "KIND_CPU"}, {"kind": "KIND_GPU"}]}}, True),
        ({"instance_group": [{"kind": "KIND_GPU"}]}, True),  # the config itself
        ({"config": {}}, False),  # no group: Triton's default placement is not assumed to be a GPU
        ({"config": {"instance_group": "KIND_GPU"}}, False),  # malformed: not a list of groups
    ],
)
def test_a_model_configuration_names_its_placement(config: dict[str, object], on_gpu: bool) -> None:
    assert runs_on_gpu(config) is on_gpu
