"""The composition root's telemetry wiring (kept beside process/server.py so that file only calls it): the
process's OpenTelemetry SDK from the settings, and one server's status board with the Ops/Status
service and the backlog count."""

from __future__ import annotations

import functools

import grpc

from hindsight.telemetry import InstalledTelemetry, TelemetryConfig, TelemetryConfigError, install
from hindsight_server.config import Settings
from hindsight_server.domain.model import VectorSpace
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.inference.tracing import cache_figures, inference_figures
from hindsight_server.pipelines.hot_scopes import HotScopes
from hindsight_server.process.errors import StartupError
from hindsight_server.rpc.ops import add_ops_service
from hindsight_server.store.pool import BoundedPool
from hindsight_server.store.routing import ReadRouting
from hindsight_server.store.stats import pending_embeddings, pool_figures
from hindsight_server.telemetry.recorder import Recorder
from hindsight_server.telemetry.status import HotScopeFigures, StatusBoard, StatusSources


def install_telemetry(settings: Settings) -> InstalledTelemetry | None:
    """The SDK for this process, per `telemetry.exporter` (None: nothing installed). A setting or
    OTEL_* variable it cannot use (an unknown OTLP protocol) is a StartupError naming it: `hindsight
    serve` says so and exits, as for the other settings it cannot start with."""
    config = settings.telemetry
    try:
        return install(
            TelemetryConfig(
                service_name=config.service_name,
                exporter=config.exporter,
                otlp_endpoint=config.otlp_endpoint,
                sample_ratio=config.sample_ratio,
                metrics_interval_s=config.metrics_interval_s,
            )
        )
    except TelemetryConfigError as exc:
        raise StartupError(f"telemetry: {exc}") from exc


def recorder_for(settings: Settings) -> Recorder:
    return Recorder(settings.telemetry.window_s, settings.telemetry.window_max_samples)


def attach_status(
    server: grpc.aio.Server,
    settings: Settings,
    recorder: Recorder,
    pool: BoundedPool,
    inference: InferenceTier | None,
    routing: ReadRouting,
    hot: HotScopes,
) -> StatusBoard:
    """The server's status board, served as Ops/Status (call before the server starts)."""

    def hot_figures() -> HotScopeFigures:
        return hot.figures

    sources = (
        StatusSources(functools.partial(pool_figures, pool), reads=routing.figures, hot_scopes=hot_figures)
        if inference is None
        else StatusSources(
            functools.partial(pool_figures, pool),
            functools.partial(cache_figures, inference),
            functools.partial(inference_figures, inference),
            routing.figures,
            hot_figures,
        )
    )
    board = StatusBoard(recorder, settings.telemetry.recall_p99_target_ms, sources)
    add_ops_service(server, board.snapshot)
    return board


async def watch_backlog(board: StatusBoard, pool: BoundedPool, settings: Settings) -> None:
    config = settings.telemetry
    space_models = settings.inference.space_models() if settings.inference.url else {}
    await board.watch_backlog(
        functools.partial(pending_embeddings, pool, contexts=VectorSpace.ENGLISH_CONTEXT in space_models),
        config.backlog_interval_s,
        config.backlog_cap,
    )
