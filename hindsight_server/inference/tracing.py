"""The inference tier in traces and metrics: a span per Triton inference call (model, batch size), from
the embedder client's `on_call` hook, and the tier's figures for `hindsight status`."""

from __future__ import annotations

import functools
import time

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from embedder.client import CallRecord
from hindsight.telemetry import rpc_attributes
from hindsight_server.domain.model import VectorSpace
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.telemetry.recorder import TRACER
from hindsight_server.telemetry.status import CacheFigures, InferenceFigures
from hindsight_server.telemetry.units import STAGE_BUCKETS_S

# The span's RPC attributes: every inference is Triton's ModelInfer.
_TRITON_RPC = rpc_attributes("inference.GRPCInferenceService/ModelInfer")


@functools.cache
def _inference_duration() -> metrics.Histogram:
    return metrics.get_meter("hindsight_server").create_histogram(
        "hindsight.inference.duration",
        unit="s",
        description="One inference call to the Triton tier (attributes: model, batch size)",
        explicit_bucket_boundaries_advisory=STAGE_BUCKETS_S,
    )


def record_call(record: CallRecord) -> None:
    """The `on_call` hook of the tier's clients. It runs when the call has ended, so the span is
    recorded after the fact with the call's own start and end. Readiness probes and metadata reads
    are not traced (one every second per model), nor calls outside a traced request (the backfill
    worker); the histogram counts every inference."""
    if record.operation != "infer":
        return
    attributes: dict[str, str | int] = {
        "hindsight.inference.model": record.model,
        "hindsight.inference.batch_size": record.items,
    }
    _inference_duration().record(record.seconds, attributes)
    if not trace.get_current_span().get_span_context().is_valid:
        return
    end = time.time_ns()
    span = TRACER.start_span(
        f"triton infer {record.model}",
        kind=SpanKind.CLIENT,
        start_time=end - int(record.seconds * 1e9),
        attributes={**_TRITON_RPC, **attributes},
    )
    if record.error is not None:
        span.set_attribute("error.type", type(record.error).__name__)
        span.set_status(Status(StatusCode.ERROR, type(record.error).__name__))
    span.end(end_time=end)


def inference_figures(tier: InferenceTier) -> InferenceFigures:
    return InferenceFigures(
        available=tier.available,
        problem=tier.problem,
        own_spaces=tuple(
            s.value for s in VectorSpace if s is not VectorSpace.MULTILINGUAL and tier.serves(s)
        ),
        rerank=tier.can_rerank,
        rerank_on_gpu=tier.rerank_on_gpu,
    )


def cache_figures(tier: InferenceTier) -> dict[str, CacheFigures]:
    return {
        space.value: CacheFigures(stats.hits, stats.misses, stats.size, stats.capacity)
        for space, stats in tier.query_cache_stats().items()
    }
