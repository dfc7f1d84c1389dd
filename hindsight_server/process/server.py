"""The composition root: one memory server from one Settings object, built in steps (the database and the
inference tier, the pipelines, the gRPC server, the background tasks), and run until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1._async import HealthServicer

from hindsight.telemetry import tracing_enabled
from hindsight_server.config import Settings
from hindsight_server.domain.admission import Admission
from hindsight_server.domain.clock import Clock, system_clock
from hindsight_server.domain.errors import HindsightError
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.inference.summarizer import LlmSummarizer
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.offload import start_workers
from hindsight_server.pipelines.access import AccessTracker
from hindsight_server.pipelines.activity import WriteActivity
from hindsight_server.pipelines.audit import RecallAudit
from hindsight_server.pipelines.backfill import BackfillSettings, EmbeddingBackfill
from hindsight_server.pipelines.erasure import ErasurePipeline
from hindsight_server.pipelines.feed import FeedPipeline
from hindsight_server.pipelines.hot_scopes import HotScopes
from hindsight_server.pipelines.jobs import JobScheduler
from hindsight_server.pipelines.portability import PortabilityPipeline
from hindsight_server.pipelines.read import ReadPipeline
from hindsight_server.pipelines.recall import RecallPipeline, RecallSettings
from hindsight_server.pipelines.replies import IdempotentReplies
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.pipelines.sessions import SessionPipeline
from hindsight_server.pipelines.statistics import StatisticsRefresh
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.pipelines.webhooks import WebhookDispatcher
from hindsight_server.pipelines.write import WritePipeline
from hindsight_server.process.builders import (
    build_jobs,
    embedding_models,
    erasure_pipeline,
    feed_pipeline,
    hot_scope_settings,
    idempotent_replies,
    recall_audit,
    routing_settings,
    schema_shape,
    server_name,
    session_pipeline,
    webhook_delivery,
    write_settings,
)
from hindsight_server.process.errors import StartupError
from hindsight_server.process.inference import connect_inference
from hindsight_server.process.running import RunningServer
from hindsight_server.process.telemetry import attach_status, install_telemetry, recorder_for, watch_backlog
from hindsight_server.process.watch import watch_database, watch_inference
from hindsight_server.rpc.admission import AdmissionInterceptor
from hindsight_server.rpc.auth import AuthInterceptor
from hindsight_server.rpc.server import add_port, build_server, set_serving
from hindsight_server.rpc.servicer import MemoryServicer, ServicerDependencies
from hindsight_server.rpc.webhooks import add_webhooks_service
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.migrate import migrate
from hindsight_server.store.pool import BoundedPool, create_pool
from hindsight_server.store.portability import PortabilityStore
from hindsight_server.store.routing import ReadRouting
from hindsight_server.store.sessions import SessionStore
from hindsight_server.store.tenants import ApiKeyStore
from hindsight_server.telemetry.collector import freeze_started
from hindsight_server.telemetry.recorder import Recorder
from hindsight_server.telemetry.status import StatusBoard

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Backends:
    """What the server talks to: the primary's pool, the replicas' routing, the inference tier (if any)."""

    pool: BoundedPool
    routing: ReadRouting
    inference: InferenceTier | None


@dataclass(frozen=True)
class _Pipelines:
    """The store and the pipelines over it, shared by the handlers and the background tasks."""

    store: MemoryStore
    recorder: Recorder
    activity: WriteActivity
    scope_sizes: ScopeSizes
    statistics: StatisticsRefresh
    writes: WritePipeline
    reads: ReadPipeline
    access: AccessTracker
    audit: RecallAudit
    recalls: RecallPipeline
    hot: HotScopes
    summarizer: LlmSummarizer | None
    sessions: SessionPipeline
    replies: IdempotentReplies
    portability: PortabilityPipeline
    erasures: ErasurePipeline
    feed: FeedPipeline


async def start_server(settings: Settings, *, clock: Clock = system_clock) -> RunningServer:
    traced = tracing_enabled()  # an SDK is installed: add the spans that cost more than no-op calls
    start_workers()  # its interpreter starts while the backends open
    backends = await _open_backends(settings, traced)
    pipelines = _build_pipelines(settings, backends, clock)
    servicer = _servicer(settings, pipelines, backends, clock)
    server, health = _build_grpc_server(settings, backends.pool, servicer, pipelines.recalls, clock, traced)
    sender, webhook_registry, webhook_dispatcher = webhook_delivery(
        settings, backends.pool, pipelines.feed, clock
    )
    add_webhooks_service(server, webhook_registry, settings.limits)
    status = attach_status(
        server,
        settings,
        pipelines.recorder,
        backends.pool,
        backends.inference,
        backends.routing,
        pipelines.hot,
    )
    security = settings.security
    address = f"{settings.server.host}:{settings.server.port}"
    port = add_port(
        server, address, security.tls_cert_file, security.tls_key_file, security.tls_client_ca_file
    )
    await server.start()
    await set_serving(health, True)
    running = RunningServer(
        server, port, backends.pool, health, settings.server.grace_s, backends.inference, pipelines.access
    )
    running.routing = backends.routing
    running.feed = pipelines.feed
    running.audit = pipelines.audit
    running.webhooks = sender
    running.summarizer = pipelines.summarizer
    running.vector_searches = pipelines.hot.vector_searches
    running.status = status
    status.name = f"{settings.server.host}:{port}"
    _spawn_background(running, settings, backends, pipelines, status, webhook_dispatcher, clock)
    return running


async def _open_backends(settings: Settings, traced: bool) -> _Backends:
    """Migrates the schema, connects the inference tier, opens the pools; StartupError when it cannot."""
    db = settings.database
    if not db.dsn:
        raise StartupError(
            "no database: set HINDSIGHT_DATABASE__DSN (or [database] dsn in the config file), "
            "or run the embedded stack with `hindsight up`"
        )
    try:
        applied = await migrate(db.dsn, schema_shape(settings), db.connect_timeout_s)
    except HindsightError as exc:
        raise StartupError(f"cannot reach the database: {exc}") from exc
    if applied:
        log.info("schema migrated: %s", ", ".join(applied))
    inference = await connect_inference(settings)

    async def serving_pool(dsn: str) -> BoundedPool:
        return await create_pool(
            dsn,
            min_size=min(db.pool_min, db.pool_max),
            max_size=db.pool_max,
            statement_timeout_ms=db.statement_timeout_ms,
            max_statement_timeout_ms=db.max_statement_timeout_ms,
            connect_timeout_s=db.connect_timeout_s,
            hnsw_ef_search=db.hnsw_ef_search,
            traced=traced,
            acquire_timeout_s=db.pool_acquire_timeout_ms / 1000,
            pinned_min_size=1,
            pinned_max_size=db.pinned_pool_max,
        )

    try:
        pool = await serving_pool(db.dsn)
        routing = ReadRouting(pool, db.replica_dsns, routing_settings(settings), serving_pool)
        await routing.start()
    except HindsightError as exc:
        if inference is not None:
            await inference.close()
        raise StartupError(f"cannot reach the database: {exc}") from exc
    return _Backends(pool, routing, inference)


def _build_pipelines(settings: Settings, backends: _Backends, clock: Clock) -> _Pipelines:
    pool, routing, inference = backends.pool, backends.routing, backends.inference
    db, config = settings.database, settings.inference
    store = MemoryStore(pool)
    store.feed_content_tenants = frozenset(settings.feed.content_tenants)
    recorder = recorder_for(settings)
    activity = WriteActivity()  # the backfill worker gives way while writes embed inline
    scope_sizes = ScopeSizes(store)  # how large each tenant and subject is: how vectors are searched
    statistics = StatisticsRefresh(store, db.analyze_after_rows)  # plans made for a grown tenant's size
    writes = WritePipeline(
        store,
        write_settings(settings),
        clock,
        inference,
        recorder=recorder,
        activity=activity,
        scope_sizes=scope_sizes,
        statistics=statistics,
    )
    reads = ReadPipeline(routing.route(MemoryStore), settings.limits)
    access = AccessTracker(store, clock, settings.recall.access_flush_s)
    audit = recall_audit(settings, pool, clock)
    dimensions = settings.embedding
    hot = HotScopes(
        store,
        hot_scope_settings(settings),
        dimensions.by_space(),
    )
    recalls = RecallPipeline(
        store,
        RecallSettings(settings.limits, settings.recall, config.query_timeout_s, config.rerank_timeout_s),
        inference,
        access,
        recorder=recorder,
        scope_sizes=scope_sizes,
        reads=routing.route(MemoryStore),
        audit=audit if settings.audit.tenants else None,
        hot=hot,
    )
    llm = settings.sessions
    summarizer = (
        LlmSummarizer(llm.llm_url, llm.llm_model, api_key=llm.llm_api_key, timeout_s=llm.llm_timeout_s)
        if llm.llm_url
        else None
    )
    sessions = session_pipeline(settings, pool, writes, clock, summarizer, routing.route(SessionStore))
    replies = idempotent_replies(settings, pool, clock)
    portability = PortabilityPipeline(
        PortabilityStore(pool),
        store,
        embedding_models(settings),
        settings.limits,
        clock,
        inference=inference is not None,
        max_concurrent_exports=db.max_concurrent_exports,
        max_exports_per_tenant=db.max_exports_per_tenant,
        statistics=statistics,
        scope_sizes=scope_sizes,
    )

    def forget_caches(tenant_id: str) -> None:  # after an erasure: what the caches may hold of the erased
        scope_sizes.forget(tenant_id)
        hot.forget(tenant_id)
        if inference is not None:
            inference.forget_queries(tenant_id)

    return _Pipelines(
        store=store,
        recorder=recorder,
        activity=activity,
        scope_sizes=scope_sizes,
        statistics=statistics,
        writes=writes,
        reads=reads,
        access=access,
        audit=audit,
        recalls=recalls,
        hot=hot,
        summarizer=summarizer,
        sessions=sessions,
        replies=replies,
        portability=portability,
        erasures=erasure_pipeline(settings, pool, clock, forget_caches),
        feed=feed_pipeline(settings, pool),
    )


def _servicer(settings: Settings, pipelines: _Pipelines, backends: _Backends, clock: Clock) -> MemoryServicer:
    return MemoryServicer(
        ServicerDependencies(
            writes=pipelines.writes,
            reads=pipelines.reads,
            recalls=pipelines.recalls,
            sessions=pipelines.sessions,
            replies=pipelines.replies,
            limits=settings.limits,
            recall_policy=settings.recall,
            clock=clock,
            positions=backends.routing,
            portability=pipelines.portability,
            erasures=pipelines.erasures,
            feed=pipelines.feed,
            audit=pipelines.audit,
            export_idle_timeout_s=settings.database.export_idle_timeout_s,
            watch_idle_timeout_s=settings.feed.idle_timeout_s,
        )
    )


def _build_grpc_server(
    settings: Settings,
    pool: BoundedPool,
    servicer: MemoryServicer,
    recalls: RecallPipeline,
    clock: Clock,
    traced: bool,
) -> tuple[grpc.aio.Server, HealthServicer]:
    """The gRPC server with MemoryService and health behind the interceptors (API keys, admission, which
    weighs a recall by its cross-encoder's work as the recall pipeline plans it)."""
    health = HealthServicer()
    security = settings.security
    auth = AuthInterceptor(
        ApiKeys(
            ApiKeyStore(pool), clock, settings.limits, security.api_key_cache_s, security.new_key_lookups()
        ),
        required=security.require_api_keys,
        limiter=RateLimiter(security.requests_per_s_per_tenant, security.request_burst_per_tenant),
    )
    admission = AdmissionInterceptor(
        Admission(settings.admission.policy()), settings.limits.max_batch_size, recalls.rerank_load
    )
    server = build_server(servicer, health, settings.server.max_message_bytes, auth, admission, traced=traced)
    return server, health


def _spawn_background(
    running: RunningServer,
    settings: Settings,
    backends: _Backends,
    pipelines: _Pipelines,
    status: StatusBoard,
    webhook_dispatcher: WebhookDispatcher,
    clock: Clock,
) -> None:
    """What the server runs beside the calls: the watchers, the lifecycle jobs, the workers."""
    pool, inference, health = backends.pool, backends.inference, running.health
    running.spawn(watch_backlog(status, pool, settings), "count-backlog")
    running.spawn(status.watch_loop_lag(), "probe-event-loop")
    running.jobs = build_jobs(
        settings, pool, pipelines.writes, pipelines.sessions, pipelines.erasures, clock, server_name()
    )
    running.spawn(pipelines.erasures.watch_forever(settings.jobs.poll_s), "watch-erasures")
    if settings.jobs.enabled:
        scheduler = JobScheduler(running.jobs, clock, settings.jobs.poll_s)
        running.spawn(scheduler.run_forever(), "lifecycle-jobs")
    running.spawn(
        watch_database(pipelines.store, health, settings.database.health_interval_s), "watch-database"
    )
    if settings.webhooks.enabled:
        running.spawn(webhook_dispatcher.run_forever(), "webhook-deliveries")
    running.spawn(pipelines.access.run_forever(), "access-tracking")
    if settings.audit.tenants:
        running.spawn(pipelines.audit.run_forever(), "recall-audit")
    running.spawn(pipelines.statistics.run_forever(), "planner-statistics")
    running.spawn(backends.routing.watch_forever(), "watch-replicas")
    if inference is not None:
        config = settings.inference
        backfill = EmbeddingBackfill(
            pipelines.store,
            inference,
            BackfillSettings(
                config.backfill_batch,
                config.backfill_chunk,
                config.backfill_idle_s,
                config.backfill_timeout_s,
            ),
            pipelines.activity,
            pipelines.scope_sizes,
        )
        running.spawn(watch_inference(inference, health, config.health_interval_s), "watch-inference")
        running.spawn(backfill.run_forever(), "embedding-backfill")


async def serve(settings: Settings) -> None:
    """Runs one memory server until SIGINT or SIGTERM, then shuts down gracefully."""
    telemetry = install_telemetry(settings)  # before the server starts: it asks whether tracing is on
    running = await start_server(settings)
    frozen = freeze_started(settings.server.gc_thresholds)
    log.info("%d objects of the started server frozen out of the garbage collector's reach", frozen)
    print(f"hindsight memory server listening on {settings.server.host}:{running.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down (grace %.1fs)", settings.server.grace_s)
    await running.stop()
    if telemetry is not None:
        telemetry.shutdown()  # exports what is still buffered
