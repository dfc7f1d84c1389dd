"""Async clients of the inference tier over Triton's gRPC API (`tritonclient.grpc.aio`).

Every call carries a deadline (`timeout_s`), and every tritonclient failure is translated into
`InferenceUnavailable` / `InferenceError` in one place (`_ModelClient._call`). An inference's deadline
is kept by the client and by Triton's queue, never by cancelling the RPC (`_waited_uncancelled`). An optional
`on_call` hook receives a `CallRecord` per RPC: the place to attach tracing or metrics. `tls`
(`hindsight.tls.ClientTls`): the channel to Triton speaks TLS, mTLS with a client certificate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, InferInput, InferRequestedOutput, InferResult
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from embedder.cache import CacheStats, TTLCache
from embedder.errors import InferenceBusy, InferenceError, InferenceUnavailable
from hindsight.tls import ClientTls

DEFAULT_URL = "127.0.0.1:8001"
# tritonclient's message limits, plus a short reconnect backoff (gRPC's default grows to 120 s), so a
# client finds a restarted tier within seconds however long it was down.
_CHANNEL_ARGS = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
T = TypeVar("T")
FloatMatrix = npt.NDArray[np.float32]

# gRPC codes meaning "cannot answer now" (NOT_FOUND: the model is not loaded in this tier), and among
# them those of a tier that is up but did not answer in time.
_UNAVAILABLE = frozenset(
    f"StatusCode.{code}"
    for code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "RESOURCE_EXHAUSTED", "NOT_FOUND")
)
_BUSY = frozenset(f"StatusCode.{code}" for code in ("DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"))
# What Triton answers for a request its queue dropped once the request's own timeout had passed.
_QUEUE_TIMEOUT = "Request timeout expired"
# An inference the caller stopped waiting for still runs to its answer, which is dropped: tritonserver
# 24.10 (the PyTriton wheel's) can crash with SIGSEGV when a client cancels an RPC it is answering
# (server issues #7368 and #8034, fixed in 24.12). An abandoned document batch or rerank that has not
# started is dropped by its model's queue policy at its own timeout (embedder/repository.py,
# QUEUE_POLICY); an abandoned query runs, its model having no policy.
# The RPC's gRPC deadline is the caller's plus this grace: a backstop for a tier that stopped answering.
ABANDONED_GRACE_S = 10.0


@dataclass(frozen=True)
class CallRecord:
    """One RPC to the tier, for tracing/metrics hooks."""

    model: str
    operation: str  # infer | ready | metadata | config | index
    items: int  # texts or passages sent
    seconds: float
    error: InferenceError | None


CallHook = Callable[[CallRecord], None]


@dataclass(frozen=True)
class EmbeddingResult:
    vectors: FloatMatrix  # [n, dimension], L2-normalised
    truncated: npt.NDArray[np.bool_]  # [n]: the text was longer than the model's limit and was cut


@dataclass(frozen=True)
class QueryEmbedding:
    vector: FloatMatrix  # [dimension], read-only (shared by the cache)
    truncated: bool
    cached: bool = False  # answered from the query cache (for tracing)


class _ModelClient:
    """One Triton model behind one gRPC channel (opened on first use, inside the running loop)."""

    def __init__(self, url: str, model: str, on_call: CallHook | None, tls: ClientTls | None) -> None:
        self.url, self.model = url, model
        self._on_call = on_call
        self._tls = tls
        self._client: InferenceServerClient | None = None
        # Inferences whose caller stopped waiting, held until they answer (the loop keeps only weak
        # references to tasks).
        self._abandoned: set[asyncio.Future[Any]] = set()

    async def ready(self, *, timeout_s: float = 1.0) -> bool:
        """True when the server answers and the model is READY; never raises."""
        try:
            ready = await self._call(
                "ready", 0, lambda c: c.is_model_ready(self.model, client_timeout=timeout_s)
            )
        except InferenceError:
            return False
        return bool(ready)

    async def deployed(self, *, timeout_s: float = 1.0) -> bool:
        """Whether the tier's model repository has this model; raises `InferenceUnavailable` when down."""
        index = await self._call("index", 0, lambda c: c.get_model_repository_index(client_timeout=timeout_s))
        return any(entry.name == self.model for entry in index.models)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def _call(
        self,
        operation: str,
        items: int,
        rpc: Callable[[InferenceServerClient], Awaitable[T]],
        *,
        wait_s: float | None = None,
    ) -> T:
        """`rpc` on this model's channel, its failure translated; with `wait_s`, awaited that long at most
        and never cancelled (see ABANDONED_GRACE_S)."""
        if self._client is None:
            self._client = _open(self.url, self._tls)
        started, failure = time.perf_counter(), None
        try:
            if wait_s is None:
                return await rpc(self._client)
            return await self._waited_uncancelled(rpc(self._client), wait_s)
        except InferenceServerException as exc:
            failure = _translate(self.model, operation, exc)
            raise failure from exc
        except TimeoutError:
            waited = f"no answer within its deadline ({wait_s:.3g} s)"
            failure = InferenceBusy(f"{self.model} {operation}: {waited}")
            raise failure from None
        finally:
            if self._on_call is not None:
                self._on_call(
                    CallRecord(self.model, operation, items, time.perf_counter() - started, failure)
                )

    async def _waited_uncancelled(self, call: Awaitable[T], wait_s: float) -> T:
        """The answer of `call` if it comes within `wait_s` (else TimeoutError); when the wait ends
        first, or its waiter is cancelled, the call runs on and its outcome is dropped."""
        task = asyncio.ensure_future(call)
        try:
            async with asyncio.timeout(wait_s):
                return await asyncio.shield(task)
        except BaseException:
            if not task.done():
                self._abandoned.add(task)
                task.add_done_callback(self._drop_outcome)
            raise

    def _drop_outcome(self, task: asyncio.Future[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an abandoned call's failure is nobody's to report

    @property
    def abandoned(self) -> int:
        """Inferences whose caller stopped waiting and that have not answered yet."""
        return len(self._abandoned)


def _open(url: str, tls: ClientTls | None) -> InferenceServerClient:
    if tls is None:
        return InferenceServerClient(url, channel_args=_CHANNEL_ARGS)
    # tritonclient takes ready credentials as they are; the name override is a channel option.
    return InferenceServerClient(url, creds=tls.credentials(), channel_args=[*_CHANNEL_ARGS, *tls.options()])


def _translate(model: str, operation: str, exc: InferenceServerException) -> InferenceError:
    status = exc.status()
    message = f"{model} {operation}: {status or 'error'}: {exc.message()}"
    if status in _BUSY or _QUEUE_TIMEOUT in str(exc.message()):
        return InferenceBusy(message)
    return InferenceUnavailable(message) if status in _UNAVAILABLE else InferenceError(message)


class TritonEmbedder(_ModelClient):
    """Texts -> L2-normalised vectors from the `embed` model; single queries go through a TTL LRU cache."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        model: str = "embed",
        query_prefix: str = "",
        document_prefix: str = "",
        cache_size: int = 1024,
        cache_ttl_s: float = 300.0,
        cache_max_share: float = 1.0,
        on_call: CallHook | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        super().__init__(url, model, on_call, tls)
        # Some models are trained with an instruction before queries (bge: "Represent this sentence for
        # searching relevant passages: "), some with one before documents too (e5: "query: " and
        # "passage: "); the model embeds exactly what it is sent.
        self._query_prefix = query_prefix
        self._document_prefix = document_prefix
        # Partitioned by tenant: one tenant's new queries evict its own (cache_max_share of it at most).
        self._cache: TTLCache[str, QueryEmbedding] = TTLCache(
            cache_size, cache_ttl_s, max_share=cache_max_share
        )
        self._dimension: int | None = None
        self._max_batch_size = 0

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            raise RuntimeError("dimension unknown: await connect() first")
        return self._dimension

    async def connect(self, *, timeout_s: float = 5.0) -> int:
        """Read the model's metadata and config (dimension, max batch size); returns the dimension."""
        metadata = await self._call(
            "metadata", 0, lambda c: c.get_model_metadata(self.model, client_timeout=timeout_s)
        )
        config = await self._call(
            "config", 0, lambda c: c.get_model_config(self.model, client_timeout=timeout_s)
        )
        embedding = next(o for o in metadata.outputs if o.name == "embedding")
        self._max_batch_size = int(config.config.max_batch_size)
        self._dimension = int(embedding.shape[-1])
        return self._dimension

    async def embed(self, texts: Sequence[str], *, timeout_s: float) -> EmbeddingResult:
        """Embed the documents `texts` within `timeout_s` seconds, in parallel requests of at most the
        model's max batch."""
        prefix = self._document_prefix
        return await self._embed([prefix + text for text in texts] if prefix else texts, timeout_s)

    async def _embed(self, texts: Sequence[str], timeout_s: float) -> EmbeddingResult:
        deadline = asyncio.get_running_loop().time() + timeout_s
        if self._dimension is None:
            await self.connect(timeout_s=timeout_s)
        if not texts:
            return EmbeddingResult(np.zeros((0, self.dimension), np.float32), np.zeros(0, np.bool_))
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise InferenceBusy(f"{self.model} infer: deadline exceeded before the call")
        size = self._max_batch_size or len(texts)
        chunks = [texts[i : i + size] for i in range(0, len(texts), size)]
        parts = await asyncio.gather(*(self._infer(chunk, remaining) for chunk in chunks))
        return EmbeddingResult(
            vectors=np.concatenate([vectors for vectors, _ in parts]),
            truncated=np.concatenate([flags for _, flags in parts]),
        )

    async def embed_query(self, text: str, *, timeout_s: float, tenant_id: str = "") -> QueryEmbedding:
        """One query's embedding; the tenant's repeated queries within the TTL are answered from the
        cache."""
        cached = self._cache.get(text, tenant_id)
        if cached is not None:
            return cached  # stored already marked: no copy per hit
        result = await self._embed([self._query_prefix + text], timeout_s)
        vector = result.vectors[0].copy()
        vector.setflags(write=False)
        embedding = QueryEmbedding(vector, bool(result.truncated[0]))
        self._cache.put(text, dataclasses.replace(embedding, cached=True), tenant_id)
        return embedding

    def query_cache_stats(self) -> CacheStats:
        return self._cache.stats()

    def forget_queries(self, tenant_id: str | None = None) -> None:
        """Drops the tenant's cached query vectors, or everyone's (an erasure: the queries may have named
        what was erased)."""
        self._cache.clear(tenant_id)

    async def _infer(
        self, texts: Sequence[str], timeout_s: float
    ) -> tuple[FloatMatrix, npt.NDArray[np.bool_]]:
        text = InferInput("text", [len(texts), 1], "BYTES")
        text.set_data_from_numpy(np.array(texts, dtype=np.object_).reshape(-1, 1))
        outputs = [InferRequestedOutput("embedding"), InferRequestedOutput("truncated")]
        result: InferResult = await self._call(
            "infer",
            len(texts),
            lambda c: c.infer(
                self.model,
                [text],
                outputs=outputs,
                timeout=max(1, int(timeout_s * 1e6)),  # µs: the model's queue drops it after that
                client_timeout=timeout_s + ABANDONED_GRACE_S,
            ),
            wait_s=timeout_s,
        )
        return _output(result, "embedding").astype(np.float32), _output(result, "truncated").reshape(-1)


class TritonReranker(_ModelClient):
    """(query, passages) -> one cross-encoder score per passage from the optional `rerank` model.

    `deployed()` tells whether the tier has a cross-encoder at all; `ready()` whether it can answer now.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        model: str = "rerank",
        on_call: CallHook | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        super().__init__(url, model, on_call, tls)

    async def on_gpu(self, *, timeout_s: float = 1.0) -> bool:
        """Whether the tier runs the cross-encoder on a GPU (its model configuration's instance groups)."""
        config = await self._call(
            "config", 0, lambda c: c.get_model_config(self.model, as_json=True, client_timeout=timeout_s)
        )
        return runs_on_gpu(config)

    async def rerank(self, query: str, passages: Sequence[str], *, timeout_s: float) -> list[float]:
        """Scores (raw logits, higher = more relevant) in the order of `passages`."""
        if not passages:
            return []
        query_input = InferInput("query", [1], "BYTES")
        query_input.set_data_from_numpy(np.array([query], dtype=np.object_))
        passages_input = InferInput("passages", [len(passages)], "BYTES")
        passages_input.set_data_from_numpy(np.array(passages, dtype=np.object_))
        result: InferResult = await self._call(
            "infer",
            len(passages),
            lambda c: c.infer(
                self.model,
                [query_input, passages_input],
                timeout=max(1, int(timeout_s * 1e6)),
                client_timeout=timeout_s + ABANDONED_GRACE_S,
            ),
            wait_s=timeout_s,
        )
        return [float(score) for score in _output(result, "scores")]


def runs_on_gpu(config: Mapping[str, Any]) -> bool:
    """Whether a model configuration, as Triton's model-config call answers it in JSON (the model's
    config.pbtxt under "config"), puts an instance of the model on a GPU."""
    body = config.get("config", config)
    groups = body.get("instance_group", []) if isinstance(body, Mapping) else []
    return any(isinstance(group, Mapping) and group.get("kind") == "KIND_GPU" for group in groups)


def _output(result: InferResult, name: str) -> npt.NDArray[Any]:
    array = result.as_numpy(name)
    if array is None:
        raise InferenceError(f"Triton's answer lacks the output {name!r}")
    return np.asarray(array)
