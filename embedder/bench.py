"""`python -m embedder.bench [--json]`: the inference tier's throughput and latency on this machine.

Starts its own tritonserver (free ports) with `embed` (the default ONNX model) and `rerank` (the random
cross-encoder of `embedder.crossencoder_builder`, same shape of work as a real one of its size), then
measures: embed throughput at batch 1 and 32 through Triton (and 16 concurrent batch-1 callers, which
Triton's dynamic batcher merges) beside the same ONNX graph called in process; one query's embedding
latency over gRPC; rerank latency for 1 query x 40 passages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import onnxruntime_extensions

from embedder.client import TritonEmbedder, TritonReranker
from embedder.crossencoder_builder import build_random_cross_encoder
from embedder.repository import (
    EmbedModelOptions,
    RepositoryOptions,
    RerankModelOptions,
    build_repository,
    default_embed_onnx,
)
from embedder.triton import TritonOptions, TritonPorts, TritonServer

TIMEOUT_S = 30.0
_SENTENCES = (
    "The user prefers exporting reports in CSV format",
    "用户偏好CSV格式导出报告",
    "Last Friday we discussed the quarterly budget with the finance team",
    "上周五我们和财务团队讨论了季度预算",
    "Remember that my cat is allergic to chicken",
    "记住我的猫对鸡肉过敏",
    "The deployment to the staging cluster failed twice",
    "部署到预发布集群失败了两次",
)


def corpus(n: int) -> list[str]:
    return [f"{_SENTENCES[i % len(_SENTENCES)]} #{i}" for i in range(n)]


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.array(samples_s) * 1e3
    return {f"p{q}": round(float(np.percentile(ms, q)), 3) for q in (50, 95, 99)}


async def timed(call: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def in_process_throughput(onnx_path: Path, batch: int, rounds: int) -> float:
    options = ort.SessionOptions()
    options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    texts = corpus(batch * rounds)
    session.run(None, {"inputs": np.array(texts[:batch], dtype=np.object_)})
    started = time.perf_counter()
    for i in range(rounds):
        session.run(None, {"inputs": np.array(texts[i * batch : (i + 1) * batch], dtype=np.object_)})
    return batch * rounds / (time.perf_counter() - started)


async def measure(server: TritonServer, rounds: int) -> dict[str, object]:
    async with (
        TritonEmbedder(server.grpc_url, cache_size=0) as embedder,
        TritonReranker(server.grpc_url) as reranker,
    ):
        await embedder.connect()
        texts = corpus(32 * rounds)
        await embedder.embed(texts[:32], timeout_s=TIMEOUT_S)  # warm-up

        async def throughput(batch: int, callers: int) -> float:
            per_caller = rounds * (32 // batch if batch < 32 else 1) // callers
            started = time.perf_counter()

            async def caller(offset: int) -> None:
                for i in range(per_caller):
                    start = (offset * per_caller + i) * batch % len(texts)
                    await embedder.embed(texts[start : start + batch], timeout_s=TIMEOUT_S)

            await asyncio.gather(*(caller(c) for c in range(callers)))
            return batch * per_caller * callers / (time.perf_counter() - started)

        queries = iter(corpus(10 * rounds))
        single = await timed(lambda: embedder.embed([next(queries)], timeout_s=TIMEOUT_S), 10 * rounds)
        query, passages = "用户偏好什么导出格式? which export format does the user prefer", corpus(40)
        await reranker.rerank(query, passages, timeout_s=TIMEOUT_S)
        rerank = await timed(lambda: reranker.rerank(query, passages, timeout_s=TIMEOUT_S), 3 * rounds)
        onnx_path = default_embed_onnx()
        return {
            "embed_texts_per_s": {
                "triton_batch_1": round(await throughput(1, 1)),
                "triton_batch_1_x16_concurrent": round(await throughput(1, 16)),
                "triton_batch_32": round(await throughput(32, 1)),
                "in_process_batch_1": round(in_process_throughput(onnx_path, 1, 32 * rounds)),
                "in_process_batch_32": round(in_process_throughput(onnx_path, 32, rounds)),
            },
            "embed_one_query_grpc_ms": percentiles(single),
            "rerank_1x40_ms": percentiles(rerank),
            "dimension": embedder.dimension,
            "embed_model": str(onnx_path.name),
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m embedder.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=50, help="scale of every measurement")
    parser.add_argument(
        "--batch-invariant", action="store_true", help="one graph call per text (identical vectors, slower)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="embedder-bench-") as tmp:
        work_dir = Path(tmp)
        cross_encoder = build_random_cross_encoder(work_dir / "cross-encoder", hidden=384)
        embed = EmbedModelOptions(batch_invariant=args.batch_invariant)
        options = RepositoryOptions(embed, RerankModelOptions(cross_encoder))
        models = build_repository(work_dir / "models", options)
        with TritonServer(TritonOptions(work_dir / "models", tuple(models), TritonPorts.free())) as server:
            results = asyncio.run(measure(server, args.rounds))
    if args.json:
        print(json.dumps(results))
        return
    for section, values in results.items():
        print(f"{section}: {values}")


if __name__ == "__main__":
    main()
