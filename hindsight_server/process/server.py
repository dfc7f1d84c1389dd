"""The composition root: builds the pool, store, pipelines and gRPC server from one Settings object."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg
import grpc
from grpc_health.v1._async import HealthServicer

from embedder.client import TritonEmbedder, TritonReranker
from hindsight.telemetry import tracing_enabled
from hindsight_server.config import Settings
from hindsight_server.domain.admission import Admission
from hindsight_server.domain.clock import Clock, system_clock
from hindsight_server.domain.consolidation import ConsolidationPolicy
from hindsight_server.domain.errors import HindsightError
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.portability import EmbeddingModel
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.inference.summarizer import LlmSummarizer
from hindsight_server.inference.tier import DimensionMismatch, InferenceTier
from hindsight_server.inference.tracing import record_call
from hindsight_server.outbound.webhook_http import WebhookSender
from hindsight_server.pipelines.access import AccessTracker
from hindsight_server.pipelines.activity import WriteActivity
from hindsight_server.pipelines.audit import AuditSettings, RecallAudit
from hindsight_server.pipelines.backfill import BackfillSettings, EmbeddingBackfill
from hindsight_server.pipelines.erasure import ErasurePipeline, ErasureSettings
from hindsight_server.pipelines.feed import FeedPipeline, FeedSettings
from hindsight_server.pipelines.item_isolation import ItemIsolation
from hindsight_server.pipelines.jobs import JobRegistry, JobRunner, JobScheduler
from hindsight_server.pipelines.lifecycle import LifecycleJobs, LifecycleSettings
from hindsight_server.pipelines.portability import PortabilityPipeline
from hindsight_server.pipelines.read import ReadPipeline
from hindsight_server.pipelines.recall import RecallPipeline, RecallSettings
from hindsight_server.pipelines.replies import IdempotentReplies, ReplySettings
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.pipelines.sessions import SessionPipeline, SessionSettings
from hindsight_server.pipelines.statistics import StatisticsRefresh
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.pipelines.webhooks import WebhookDispatcher, WebhookRegistry, WebhookSettings
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from hindsight_server.process.errors import StartupError
from hindsight_server.process.telemetry import attach_status, install_telemetry, recorder_for, watch_backlog
from hindsight_server.rpc.admission import AdmissionInterceptor
from hindsight_server.rpc.auth import AuthInterceptor
from hindsight_server.rpc.server import add_port, build_server, set_inference_serving, set_serving
from hindsight_server.rpc.servicer import MemoryServicer
from hindsight_server.rpc.webhooks import add_webhooks_service
from hindsight_server.store.audit import AuditStore
from hindsight_server.store.erasure import ErasureStore
from hindsight_server.store.feed import FeedStore
from hindsight_server.store.job_failures import JobItemFailures
from hindsight_server.store.jobs import JobStore
from hindsight_server.store.lifecycle import LifecycleStore
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.migrate import EmbeddingDimensions, SchemaShape, migrate
from hindsight_server.store.pool import BoundedPool, create_pool
from hindsight_server.store.portability import PortabilityStore
from hindsight_server.store.replies import ReplyStore
from hindsight_server.store.routing import ReadRoute, ReadRouting, RoutingSettings
from hindsight_server.store.sessions import SessionStore
from hindsight_server.store.tenants import ApiKeyStore
from hindsight_server.store.webhooks import WebhookStore
from hindsight_server.telemetry.status import StatusBoard

log = logging.getLogger(__name__)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    pool: BoundedPool
    health: HealthServicer
    grace_s: float
    inference: InferenceTier | None = None
    access: AccessTracker | None = None
    summarizer: LlmSummarizer | None = None
    jobs: JobRunner | None = None  # the lifecycle jobs (scheduled here when settings.jobs.enabled)
    status: StatusBoard | None = None  # the figures of `hindsight status` (Ops/Status)
    routing: ReadRouting | None = None  # which reads go to which replica
    feed: FeedPipeline | None = None  # the Watch streams, ended before the pool closes
    audit: RecallAudit | None = None  # the recall audit's buffer, written before the pool closes
    webhooks: WebhookSender | None = None  # closed after the deliveries (background tasks) stop
    background: list[asyncio.Task[None]] = field(default_factory=list)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        self.background.append(asyncio.create_task(work, name=name))

    async def stop(self) -> None:
        """Stops accepting calls, lets in-flight ones finish within the grace period, closes the pool.
        Bounded: each step that waits on others gets the grace period and a second more, then is forced."""
        patience_s = self.grace_s + 1.0
        await self.health.enter_graceful_shutdown()
        await cancel_all(self.background, patience_s)
        if self.feed is not None:
            self.feed.close()
        await self.server.stop(self.grace_s)
        if self.access is not None:
            with contextlib.suppress(HindsightError):
                await self.access.flush()  # what the last calls recalled
        if self.audit is not None:
            with contextlib.suppress(HindsightError):
                await self.audit.flush()  # the last recalls' audit entries
        await self.pool.close_within(patience_s)
        if self.routing is not None:
            await self.routing.close(patience_s)
        if self.inference is not None:
            await self.inference.close()
        if self.summarizer is not None:
            await self.summarizer.close()
        if self.status is not None:
            self.status.close()
        if self.webhooks is not None:
            await self.webhooks.close()


async def cancel_all(tasks: Sequence[asyncio.Task[None]], patience_s: float) -> None:
    """Cancels the tasks again and again until each has ended, for at most `patience_s`: one cancel can be
    lost (a library's wait_for on Python 3.11 returns a result that arrived with it), and a loop that lost
    it runs on. What is still running then is named in the log, with where it waits, and left behind."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    pending = {task for task in tasks if not task.done()}
    while pending and loop.time() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(0.5, max(deadline - loop.time(), 0.0)))
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: asyncio would otherwise log it again at exit
    for task in pending:
        frames = task.get_stack(limit=1)
        where = f"{frames[0].f_code.co_filename}:{frames[0].f_lineno}" if frames else "?"
        log.error("background task %s did not stop when cancelled (it waits at %s)", task.get_name(), where)


async def _watch_database(store: MemoryStore, health: HealthServicer, interval_s: float) -> None:
    """Readiness follows the database: NOT_SERVING while it cannot be reached, SERVING when it is back."""
    serving = True
    while True:
        await asyncio.sleep(interval_s)
        try:
            async with asyncio.timeout(interval_s):
                await store.ping()
            healthy = True
        except (HindsightError, TimeoutError):
            healthy = False
        if healthy != serving:
            log.warning("database %s", "reachable again" if healthy else "unreachable: reporting NOT_SERVING")
            await set_serving(health, healthy)
            serving = healthy


async def _watch_inference(tier: InferenceTier, health: HealthServicer, interval_s: float) -> None:
    """Probes the tier; its health entry follows. A model of the wrong dimension is never used."""
    while True:
        try:
            available = await tier.refresh()
        except DimensionMismatch as exc:
            log.error("%s", exc)
            available = False
        await set_inference_serving(health, available)
        await asyncio.sleep(interval_s)


def schema_shape(settings: Settings) -> SchemaShape:
    """What a new database's tables are built with (store/migrate.py)."""
    return SchemaShape(
        EmbeddingDimensions(settings.embedding.dimension, settings.embedding.english_dimension),
        settings.database.memory_partitions,
    )


async def _connect_inference(settings: Settings) -> InferenceTier | None:
    """The tier when one is configured. Unreachable is fine (writes defer, recall degrades); a model of
    another dimension than the table's stops start-up."""
    config = settings.inference
    if not config.url:
        return None
    models = {VectorSpace.MULTILINGUAL: (config.embed_model, "")}
    if config.english_model:
        models[VectorSpace.ENGLISH] = (config.english_model, config.english_query_prefix)

    def embedder(model: str, query_prefix: str) -> TritonEmbedder:
        return TritonEmbedder(
            config.url,
            model=model,
            query_prefix=query_prefix,
            cache_size=config.query_cache_size,
            cache_ttl_s=config.query_cache_ttl_s,
            cache_max_share=config.query_cache_max_share,
            on_call=record_call,
            tls=config.client_tls,
        )

    embedders = {space: embedder(model, prefix) for space, (model, prefix) in models.items()}
    query_embedders = (
        {
            space: embedder(model + config.query_model_suffix, prefix)
            for space, (model, prefix) in models.items()
        }
        if config.query_model_suffix
        else {}
    )
    tier = InferenceTier(
        embedders,
        {
            VectorSpace.MULTILINGUAL: settings.embedding.dimension,
            VectorSpace.ENGLISH: settings.embedding.english_dimension,
        },
        reranker=(
            TritonReranker(config.url, model=config.rerank_model, on_call=record_call, tls=config.client_tls)
            if config.rerank_model
            else None
        ),
        query_embedders=query_embedders,
    )
    try:
        await tier.refresh()
    except DimensionMismatch as exc:
        await tier.close()
        raise StartupError(str(exc)) from exc
    if not tier.available:
        log.warning(
            "starting without the inference tier (%s); it is probed every %.1fs",
            tier.problem,
            config.health_interval_s,
        )
    return tier


def _write_settings(settings: Settings) -> WriteSettings:
    config = settings.inference
    return WriteSettings(
        settings.limits,
        settings.ttl,
        settings.write,
        inline_budget_s=config.inline_budget_s,
        inline_budget_per_item_s=config.inline_budget_per_item_s,
        english_inline_max_batch=config.english_inline_max_batch,
        conflicts=settings.conflicts,
        exact_search_factor=settings.recall.exact_search_factor,
    )


def _server_name() -> str:
    """Who ran a job, as job_runs records it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _session_pipeline(
    settings: Settings,
    pool: asyncpg.Pool,
    writes: WritePipeline,
    clock: Clock,
    summarizer: LlmSummarizer | None = None,
    reads: ReadRoute[SessionStore] | None = None,
) -> SessionPipeline:
    config = settings.sessions
    return SessionPipeline(
        SessionStore(pool),
        writes,
        SessionSettings(
            settings.limits,
            settings.write,
            keep_turns=config.keep_turns,
            refresh_every_turns=config.refresh_every_turns,
            consolidation=ConsolidationPolicy(
                every_turns=config.consolidate_every_turns,
                idle=timedelta(seconds=config.consolidate_idle_s),
            ),
        ),
        clock,
        summarizer,
        isolation=item_isolation(settings, pool),
        reads=reads,
    )


def item_isolation(settings: Settings, pool: asyncpg.Pool) -> ItemIsolation:
    """How the lifecycle jobs run each item on its own (pipelines/item_isolation.py)."""
    return ItemIsolation(
        JobItemFailures(pool),
        backoff_s=settings.jobs.item_retry_s,
        max_backoff_s=settings.jobs.item_max_retry_s,
    )


def _erasures(
    settings: Settings,
    pool: asyncpg.Pool,
    clock: Clock,
    forget_caches: Callable[[str], None] = lambda _tenant: None,
) -> ErasurePipeline:
    jobs = settings.jobs
    return ErasurePipeline(
        ErasureStore(pool),
        ErasureSettings(settings.limits, jobs.batch_size, timedelta(seconds=jobs.erasure_stale_s)),
        clock,
        forget_caches,
    )


def embedding_models(settings: Settings) -> list[EmbeddingModel]:
    """The models this deployment embeds with, as exports name them (none without an inference tier)."""
    inference, dimensions = settings.inference, settings.embedding
    if not inference.url:
        return []
    models = [EmbeddingModel(VectorSpace.MULTILINGUAL, inference.embed_model, dimensions.dimension)]
    if inference.english_model:
        models.append(
            EmbeddingModel(VectorSpace.ENGLISH, inference.english_model, dimensions.english_dimension)
        )
    return models


def _routing_settings(settings: Settings) -> RoutingSettings:
    db = settings.database
    return RoutingSettings(
        max_lag_s=db.max_replica_lag_ms / 1000,
        check_interval_s=db.replica_check_interval_s,
        wait_s=db.replica_wait_ms / 1000,
        read_timeout_s=db.replica_read_timeout_ms / 1000,
    )


def _replies(settings: Settings, pool: asyncpg.Pool, clock: Clock) -> IdempotentReplies:
    server = settings.server
    kept = ReplySettings(
        keep=timedelta(seconds=server.idempotency_window_s),
        abandoned_after=timedelta(seconds=server.idempotency_claim_timeout_s),
        forget_budget=timedelta(seconds=settings.jobs.replies_budget_s),
    )
    return IdempotentReplies(ReplyStore(pool), clock, kept)


def _feed(settings: Settings, pool: asyncpg.Pool) -> FeedPipeline:
    feed = settings.feed
    return FeedPipeline(
        FeedStore(pool),
        FeedSettings(
            retention=timedelta(days=feed.retention_days),
            poll_s=feed.poll_s,
            heartbeat_s=feed.heartbeat_s,
            batch_size=feed.batch_size,
            max_streams=feed.max_streams,
            max_streams_per_tenant=feed.max_streams_per_tenant,
        ),
    )


def recall_audit(settings: Settings, pool: asyncpg.Pool, clock: Clock) -> RecallAudit:
    audit = settings.audit
    return RecallAudit(
        AuditStore(pool),
        AuditSettings(
            tenants=frozenset(audit.tenants),
            query_text_tenants=frozenset(audit.query_text_tenants),
            query_hash_key=audit.query_hash_key.encode(),
            retention=timedelta(days=audit.retention_days),
            buffer_size=audit.buffer_size,
            flush_rows=audit.flush_rows,
            flush_interval_s=audit.flush_interval_s,
        ),
        clock,
    )


def _webhook_settings(settings: Settings) -> WebhookSettings:
    hooks = settings.webhooks
    return WebhookSettings(
        max_endpoints_per_tenant=hooks.max_endpoints_per_tenant,
        max_url_chars=hooks.max_url_chars,
        max_filter_items=hooks.max_filter_items,
        retry=hooks.retry_policy(),
        rotation_overlap=timedelta(seconds=hooks.rotation_overlap_s),
        max_body_bytes=hooks.max_body_bytes,
        lease_s=hooks.lease_s,
        poll_s=hooks.poll_s,
        max_concurrent=hooks.max_concurrent,
        rate_per_s=hooks.rate_per_s,
        burst=hooks.burst,
        batch_size=hooks.batch_size,
    )


def _webhooks(
    settings: Settings, pool: asyncpg.Pool, feed: FeedPipeline, clock: Clock
) -> tuple[WebhookSender, WebhookRegistry, WebhookDispatcher]:
    """The endpoints' registry (the Webhooks RPCs) and this server's share of the deliveries."""
    hooks = settings.webhooks
    sender = WebhookSender(
        hooks.address_policy(),
        timeout_s=hooks.attempt_timeout_s,
        max_response_bytes=hooks.max_response_bytes,
        max_connections=hooks.max_concurrent,
        ca_file=hooks.ca_file,
    )
    store, feed_store, chosen = WebhookStore(pool), FeedStore(pool), _webhook_settings(settings)
    registry = WebhookRegistry(store, feed, feed_store, sender, chosen, clock)
    dispatcher = WebhookDispatcher(store, feed_store, sender, chosen, clock, _server_name())
    return sender, registry, dispatcher


def build_jobs(
    settings: Settings,
    pool: asyncpg.Pool,
    writes: WritePipeline,
    sessions: SessionPipeline,
    erasures: ErasurePipeline,
    clock: Clock,
    server: str,
) -> JobRunner:
    """The lifecycle jobs, for the server's schedule and for `hindsight jobs`."""
    jobs = settings.jobs
    lifecycle = LifecycleJobs(
        LifecycleStore(pool),
        writes,
        LifecycleSettings(
            batch_size=jobs.batch_size,
            purge_grace=timedelta(days=jobs.purge_grace_days),
            quota=jobs.quota,
            demote_after=timedelta(days=jobs.demote_after_days),
            pattern_min_episodes=jobs.pattern_min_episodes,
            pattern_min_share=jobs.pattern_min_share,
        ),
        settings.ttl,
        item_isolation(settings, pool),
    )
    registry = JobRegistry(jobs.intervals())
    for name, body in lifecycle.bodies().items():
        registry.add(name, body)
    registry.add("consolidate", sessions.consolidate_idle)  # idle sessions: working -> episodic
    registry.add("erasures", erasures.resume_stale)  # what a server that died left half erased
    registry.add("replies", _replies(settings, pool, clock).forget_expired)  # answers past their window
    # Change feed events past the retention (a batched DELETE by time: README, "Change feed").
    trim_every = timedelta(seconds=settings.feed.trim_interval_s)
    registry.add("feed", _feed(settings, pool).trim, interval=trim_every)
    # Recall audit entries past audit.retention_days, the same way (their events go with the feed's).
    audit_every = timedelta(seconds=settings.audit.trim_interval_s)
    registry.add("audit", recall_audit(settings, pool, clock).trim, interval=audit_every)
    return JobRunner(registry, JobStore(pool), clock, server)


@contextlib.asynccontextmanager
async def open_jobs(settings: Settings, *, clock: Clock = system_clock) -> AsyncIterator[JobRunner]:
    """The lifecycle jobs against the configured database, without serving (`hindsight jobs`); with
    the inference tier when one is configured, so derived memories get their embeddings."""
    db = settings.database
    try:
        await migrate(db.dsn, schema_shape(settings), db.connect_timeout_s)
    except HindsightError as exc:
        raise StartupError(f"cannot reach the database: {exc}") from exc
    inference = await _connect_inference(settings)
    try:
        pool = await create_pool(
            db.dsn,
            min_size=1,
            max_size=max(2, min(db.pool_max, 4)),  # the job's lock holds one connection
            statement_timeout_ms=db.statement_timeout_ms,
            max_statement_timeout_ms=db.max_statement_timeout_ms,
            connect_timeout_s=db.connect_timeout_s,
        )
    except HindsightError as exc:
        if inference is not None:
            await inference.close()
        raise StartupError(f"cannot reach the database: {exc}") from exc
    try:
        store = MemoryStore(pool)
        store.feed_content_tenants = frozenset(settings.feed.content_tenants)
        writes = WritePipeline(store, _write_settings(settings), clock, inference)
        sessions = _session_pipeline(settings, pool, writes, clock)
        erasures = _erasures(settings, pool, clock)
        yield build_jobs(settings, pool, writes, sessions, erasures, clock, f"{_server_name()} (cli)")
    finally:
        await pool.close()
        if inference is not None:
            await inference.close()


@contextlib.asynccontextmanager
async def open_api_keys(settings: Settings, *, clock: Clock = system_clock) -> AsyncIterator[ApiKeys]:
    """The API keys against the configured database, without serving (`hindsight tenants`)."""
    db = settings.database
    try:
        await migrate(db.dsn, schema_shape(settings), db.connect_timeout_s)
        pool = await create_pool(
            db.dsn,
            min_size=1,
            max_size=2,
            statement_timeout_ms=db.statement_timeout_ms,
            max_statement_timeout_ms=db.max_statement_timeout_ms,
            connect_timeout_s=db.connect_timeout_s,
        )
    except HindsightError as exc:
        raise StartupError(f"cannot reach the database: {exc}") from exc
    try:
        yield ApiKeys(ApiKeyStore(pool), clock, settings.limits, settings.security.api_key_cache_s)
    finally:
        await pool.close()


async def start_server(settings: Settings, *, clock: Clock = system_clock) -> RunningServer:
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
    inference = await _connect_inference(settings)
    traced = tracing_enabled()  # an SDK is installed: add the spans that cost more than no-op calls

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
        )

    try:
        pool = await serving_pool(db.dsn)
        routing = ReadRouting(pool, db.replica_dsns, _routing_settings(settings), serving_pool)
        await routing.start()
    except HindsightError as exc:
        if inference is not None:
            await inference.close()
        raise StartupError(f"cannot reach the database: {exc}") from exc

    store = MemoryStore(pool)
    store.feed_content_tenants = frozenset(settings.feed.content_tenants)
    config = settings.inference
    recorder = recorder_for(settings)
    activity = WriteActivity()  # the backfill worker gives way while writes embed inline
    scope_sizes = ScopeSizes(store)  # how large each tenant and subject is: how vectors are searched
    statistics = StatisticsRefresh(store, db.analyze_after_rows)  # plans made for a grown tenant's size
    writes = WritePipeline(
        store,
        _write_settings(settings),
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
    recalls = RecallPipeline(
        store,
        RecallSettings(settings.limits, settings.recall, config.query_timeout_s, config.rerank_timeout_s),
        inference,
        access,
        recorder=recorder,
        scope_sizes=scope_sizes,
        reads=routing.route(MemoryStore),
        audit=audit if settings.audit.tenants else None,
    )
    llm = settings.sessions
    summarizer = (
        LlmSummarizer(llm.llm_url, llm.llm_model, api_key=llm.llm_api_key, timeout_s=llm.llm_timeout_s)
        if llm.llm_url
        else None
    )
    sessions = _session_pipeline(settings, pool, writes, clock, summarizer, routing.route(SessionStore))
    replies = _replies(settings, pool, clock)
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
        if inference is not None:
            inference.forget_queries(tenant_id)

    erasures = _erasures(settings, pool, clock, forget_caches)
    feed = _feed(settings, pool)
    servicer = MemoryServicer(
        writes,
        reads,
        recalls,
        sessions,
        replies,
        settings.limits,
        settings.recall,
        clock,
        routing,
        portability,
        erasures,
        feed,
        audit,
        export_idle_timeout_s=db.export_idle_timeout_s,
        watch_idle_timeout_s=settings.feed.idle_timeout_s,
    )
    health = HealthServicer()
    security = settings.security
    auth = AuthInterceptor(
        ApiKeys(ApiKeyStore(pool), clock, settings.limits, security.api_key_cache_s),
        required=security.require_api_keys,
        limiter=RateLimiter(security.requests_per_s_per_tenant, security.request_burst_per_tenant),
    )
    admission = AdmissionInterceptor(Admission(settings.admission.policy()), settings.limits.max_batch_size)
    server = build_server(servicer, health, settings.server.max_message_bytes, auth, admission, traced=traced)
    sender, webhook_registry, webhook_dispatcher = _webhooks(settings, pool, feed, clock)
    add_webhooks_service(server, webhook_registry, settings.limits)
    status = attach_status(server, settings, recorder, pool, inference, routing)
    address = f"{settings.server.host}:{settings.server.port}"
    port = add_port(
        server, address, security.tls_cert_file, security.tls_key_file, security.tls_client_ca_file
    )
    await server.start()
    await set_serving(health, True)
    running = RunningServer(server, port, pool, health, settings.server.grace_s, inference, access)
    running.routing = routing
    running.feed = feed
    running.audit = audit
    running.webhooks = sender
    running.summarizer = summarizer
    running.status = status
    status.name = f"{settings.server.host}:{port}"
    running.spawn(watch_backlog(status, pool, settings), "count-backlog")
    running.spawn(status.watch_loop_lag(), "probe-event-loop")
    running.jobs = build_jobs(settings, pool, writes, sessions, erasures, clock, _server_name())
    running.spawn(erasures.watch_forever(settings.jobs.poll_s), "watch-erasures")
    if settings.jobs.enabled:
        scheduler = JobScheduler(running.jobs, clock, settings.jobs.poll_s)
        running.spawn(scheduler.run_forever(), "lifecycle-jobs")
    running.spawn(_watch_database(store, health, db.health_interval_s), "watch-database")
    if settings.webhooks.enabled:
        running.spawn(webhook_dispatcher.run_forever(), "webhook-deliveries")
    running.spawn(access.run_forever(), "access-tracking")
    if settings.audit.tenants:
        running.spawn(audit.run_forever(), "recall-audit")
    running.spawn(statistics.run_forever(), "planner-statistics")
    running.spawn(routing.watch_forever(), "watch-replicas")
    if inference is not None:
        backfill = EmbeddingBackfill(
            store,
            inference,
            BackfillSettings(
                config.backfill_batch,
                config.backfill_chunk,
                config.backfill_idle_s,
                config.backfill_timeout_s,
            ),
            activity,
            scope_sizes,
        )
        running.spawn(_watch_inference(inference, health, config.health_interval_s), "watch-inference")
        running.spawn(backfill.run_forever(), "embedding-backfill")
    return running


async def serve(settings: Settings) -> None:
    """Runs one memory server until SIGINT or SIGTERM, then shuts down gracefully."""
    telemetry = install_telemetry(settings)  # before the server starts: it asks whether tracing is on
    running = await start_server(settings)
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
