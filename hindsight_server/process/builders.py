"""Each part of a memory server from the Settings: the one place that translates the configuration into
the parts' own settings, shared by the server's start (process/server.py) and the offline commands
(process/offline.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta

from hindsight_server.config import Settings
from hindsight_server.domain.clock import Clock
from hindsight_server.domain.consolidation import ConsolidationPolicy
from hindsight_server.domain.portability import EmbeddingModel
from hindsight_server.inference.summarizer import LlmSummarizer
from hindsight_server.outbound.webhook_http import WebhookSender
from hindsight_server.pipelines.audit import AuditSettings, RecallAudit
from hindsight_server.pipelines.erasure import ErasurePipeline, ErasureSettings
from hindsight_server.pipelines.feed import FeedPipeline, FeedSettings
from hindsight_server.pipelines.hot_scopes import HotScopeSettings
from hindsight_server.pipelines.item_isolation import ItemIsolation
from hindsight_server.pipelines.jobs import JobRegistry, JobRunner
from hindsight_server.pipelines.lifecycle import LifecycleJobs, LifecycleSettings
from hindsight_server.pipelines.replies import IdempotentReplies, ReplySettings
from hindsight_server.pipelines.sessions import SessionPipeline, SessionSettings
from hindsight_server.pipelines.webhooks import WebhookDispatcher, WebhookRegistry, WebhookSettings
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from hindsight_server.store.audit import AuditStore
from hindsight_server.store.erasure import ErasureStore
from hindsight_server.store.feed import FeedStore
from hindsight_server.store.job_failures import JobItemFailures
from hindsight_server.store.jobs import JobStore
from hindsight_server.store.lifecycle import LifecycleStore
from hindsight_server.store.migrate import EmbeddingDimensions, SchemaShape
from hindsight_server.store.pool import BoundedPool
from hindsight_server.store.replies import ReplyStore
from hindsight_server.store.routing import ReadRoute, RoutingSettings
from hindsight_server.store.sessions import SessionStore
from hindsight_server.store.webhooks import WebhookStore


def schema_shape(settings: Settings) -> SchemaShape:
    """What a new database's tables are built with (store/migrate.py)."""
    return SchemaShape(
        EmbeddingDimensions(
            settings.embedding.dimension,
            settings.embedding.english_dimension,
            settings.embedding.chinese_dimension,
        ),
        settings.database.memory_partitions,
    )


def write_settings(settings: Settings) -> WriteSettings:
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


def server_name() -> str:
    """Who ran a job, as job_runs records it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def session_pipeline(
    settings: Settings,
    pool: BoundedPool,
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
            embed_turns_inline=config.embed_turns_inline,
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


def item_isolation(settings: Settings, pool: BoundedPool) -> ItemIsolation:
    """How the lifecycle jobs run each item on its own (pipelines/item_isolation.py)."""
    return ItemIsolation(
        JobItemFailures(pool),
        backoff_s=settings.jobs.item_retry_s,
        max_backoff_s=settings.jobs.item_max_retry_s,
    )


def erasure_pipeline(
    settings: Settings,
    pool: BoundedPool,
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
    by_space = dimensions.by_space()
    models = inference.space_models()
    return [EmbeddingModel(space, model.model, by_space[space]) for space, model in models.items()]


def hot_scope_settings(settings: Settings) -> HotScopeSettings:
    return HotScopeSettings(**settings.hot_scopes.model_dump())


def routing_settings(settings: Settings) -> RoutingSettings:
    db = settings.database
    return RoutingSettings(
        max_lag_s=db.max_replica_lag_ms / 1000,
        check_interval_s=db.replica_check_interval_s,
        wait_s=db.replica_wait_ms / 1000,
        read_timeout_s=db.replica_read_timeout_ms / 1000,
    )


def idempotent_replies(settings: Settings, pool: BoundedPool, clock: Clock) -> IdempotentReplies:
    server = settings.server
    kept = ReplySettings(
        keep=timedelta(seconds=server.idempotency_window_s),
        abandoned_after=timedelta(seconds=server.idempotency_claim_timeout_s),
        forget_budget=timedelta(seconds=settings.jobs.replies_budget_s),
    )
    return IdempotentReplies(ReplyStore(pool), clock, kept)


def feed_pipeline(settings: Settings, pool: BoundedPool) -> FeedPipeline:
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


def recall_audit(settings: Settings, pool: BoundedPool, clock: Clock) -> RecallAudit:
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


def webhook_delivery(
    settings: Settings, pool: BoundedPool, feed: FeedPipeline, clock: Clock
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
    dispatcher = WebhookDispatcher(store, feed_store, sender, chosen, clock, server_name())
    return sender, registry, dispatcher


def build_jobs(
    settings: Settings,
    pool: BoundedPool,
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
    registry.add(
        "replies", idempotent_replies(settings, pool, clock).forget_expired
    )  # answers past their window
    # Change feed events past the retention (a batched DELETE by time: README, "Change feed").
    trim_every = timedelta(seconds=settings.feed.trim_interval_s)
    registry.add("feed", feed_pipeline(settings, pool).trim, interval=trim_every)
    # Recall audit entries past audit.retention_days, the same way (their events go with the feed's).
    audit_every = timedelta(seconds=settings.audit.trim_interval_s)
    registry.add("audit", recall_audit(settings, pool, clock).trim, interval=audit_every)
    return JobRunner(registry, JobStore(pool), clock, server)
