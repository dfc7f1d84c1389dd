"""The recall path: channels in parallel -> fuse -> score -> threshold -> pack, with an explanation.

Every channel reads through the same Scope, so tenant, status, expiry and as_of rules are applied
identically whichever channel finds a memory.
"""

from __future__ import annotations

import asyncio
import math
import time
import unicodedata
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from hindsight_server.domain import ranking
from hindsight_server.domain.bm25 import Bm25
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.errors import HindsightError, InferenceUnavailable
from hindsight_server.domain.fusion import FusedCandidate, reciprocal_rank_fusion
from hindsight_server.domain.language import CHINESE, ENGLISH, language
from hindsight_server.domain.lexical import query_terms
from hindsight_server.domain.model import (
    Channel,
    ChannelHit,
    ChannelResult,
    RankedMemory,
    RecallQuery,
    RecallResult,
    Scope,
    TimeWindow,
    VectorSpace,
)
from hindsight_server.domain.packing import PackItem, pack
from hindsight_server.domain.policy import Limits, RecallPolicy
from hindsight_server.domain.query import QueryFocus, focus
from hindsight_server.domain.ranking import Around
from hindsight_server.domain.rerank import rerank_depth
from hindsight_server.domain.scope_index import ScopeIndex
from hindsight_server.domain.search_plan import ScopeSize, prefers_exact_search, split_limit
from hindsight_server.domain.timeparse import TimeExpression, parse_time
from hindsight_server.domain.validation import validate_recall
from hindsight_server.domain.vectors import FloatMatrix, FloatVector, Vectors
from hindsight_server.offload import run_pure
from hindsight_server.pipelines.access import AccessTracker
from hindsight_server.pipelines.audit import RecallAudit
from hindsight_server.pipelines.hot_scopes import HotScopes
from hindsight_server.pipelines.indexed_reads import IndexedReads
from hindsight_server.pipelines.ports import RecallInference, RecallStore
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.store.routing import PrimaryOnly, ReadRoute
from hindsight_server.telemetry.recorder import Recorder, stage, staged


@dataclass(frozen=True, slots=True)
class RecallSettings:
    limits: Limits
    policy: RecallPolicy
    query_timeout_s: float = 0.25
    rerank_timeout_s: float = 0.3


ChannelRun = Callable[[], Awaitable[ChannelRows]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SpaceQuery:
    main: FloatVector  # the (focused) query's embedding: what the vector channel searches with
    turns: FloatMatrix | None  # a dialogue's user turns, one row each
    truncated: bool = False  # a text was longer than the model reads
    cached: bool = False  # every text's vector came from the query cache

    def cosines(self, rows: FloatMatrix) -> list[float]:
        """Each row's similarity to the query, plus to its best-matching turn for a dialogue (MADial
        dev: dense R@5 +1.6 over the joined turns alone)."""
        similarity = rows @ self.main
        if self.turns is not None:
            similarity += np.max(rows @ self.turns.T, axis=1)
        cosines: list[float] = similarity.tolist()
        return cosines


@dataclass(frozen=True, slots=True)
class QueryVectors:
    by_space: dict[VectorSpace, SpaceQuery]  # the judging spaces, the preferred first
    truncated: bool
    companion: tuple[VectorSpace, SpaceQuery] | None = None  # the space whose cosine joins the judged one

    def companion_cosines(self, memory_ids: Sequence[str], vectors: Vectors) -> list[float | None]:
        """Each memory's cosine in the companion space (None: no companion, or no vector there)."""
        cosines: list[float | None] = [None] * len(memory_ids)
        if self.companion is not None:
            space, query = self.companion
            for i, cosine in _cosines(query, memory_ids, range(len(memory_ids)), vectors.get(space, {})):
                cosines[i] = cosine
        return cosines

    def similarities(
        self, memory_ids: Sequence[str], vectors: Vectors
    ) -> list[tuple[float, VectorSpace] | None]:
        """Each memory's cosine in the best space it has a vector in, and that space (None: no vector
        in any): one product per space for all of them."""
        judged: list[tuple[float, VectorSpace] | None] = [None] * len(memory_ids)
        pending: Sequence[int] = range(len(memory_ids))
        for space, query in self.by_space.items():
            for i, cosine in _cosines(query, memory_ids, pending, vectors.get(space, {})):
                judged[i] = (cosine, space)
            pending = [i for i in pending if judged[i] is None]
        return judged


def _cosines(
    query: SpaceQuery, memory_ids: Sequence[str], indexes: Sequence[int], held: Mapping[str, FloatVector]
) -> list[tuple[int, float]]:
    """(index, cosine) of each of the memories at `indexes` that has a vector in `held`: one product."""
    here = [i for i in indexes if memory_ids[i] in held]
    if not here:
        return []
    rows = np.concatenate([held[memory_ids[i]] for i in here]).reshape(len(here), -1)
    return list(zip(here, query.cosines(rows), strict=True))


@dataclass(frozen=True, slots=True)
class RecallPlan:
    """What a recall decided before it reads, built once and passed through every stage."""

    query: RecallQuery  # narrowed to a dialogue's user turns
    focused: QueryFocus
    spoken: TimeExpression | None  # the time the query speaks of
    scope: Scope
    size: ScopeSize | None  # the scope's counted size, with an inference tier
    spaces: tuple[VectorSpace, ...]  # the vector spaces a memory is judged in, preferred first
    embedding: asyncio.Task[QueryVectors] | None  # the query's, started at once
    lexical_weight: float  # BM25's share of the similarity
    rerank_depth: int  # how many of the best the cross-encoder rescores (0: none; domain/rerank.py)
    # A second space compared in beside the judging one (a Chinese query: multilingual-e5's cosine joins
    # USE's, and its own search adds candidates to the vector channel; an English one: the memories read
    # after the turn before them, for the candidates found).
    companion: VectorSpace | None = None

    @property
    def read_spaces(self) -> tuple[VectorSpace, ...]:
        """The spaces whose vectors the channels read for their candidates."""
        return self.spaces if self.companion is None else (*self.spaces, self.companion)

    @property
    def embedded(self) -> QueryVectors | None:
        """The query's vectors, once they arrived (None when they did not, or failed)."""
        task = self.embedding
        if task is None or not task.done() or task.cancelled():
            return None
        return None if task.exception() is not None else task.result()

    @property
    def time_window(self) -> TimeWindow | None:
        """The (not vague) time the query speaks of, which the ranking prefers."""
        return None if self.spoken is None or self.spoken.vague else self.spoken.window


class RecallPipeline:
    def __init__(
        self,
        store: RecallStore,
        settings: RecallSettings,
        inference: RecallInference | None = None,
        access: AccessTracker | None = None,
        *,
        recorder: Recorder | None = None,
        scope_sizes: ScopeSizes | None = None,
        reads: ReadRoute[RecallStore] | None = None,
        audit: RecallAudit | None = None,
        hot: HotScopes | None = None,
    ) -> None:
        self._audit = audit
        self._hot = hot  # the subjects this server holds in memory
        self._store = store  # the primary's
        self._reads = reads or PrimaryOnly(store)  # the channels that may read from a replica
        self._settings = settings
        self._inference = inference
        self._access = access
        self._recorder = recorder or Recorder()
        self._scope_sizes = scope_sizes or ScopeSizes(store)

    async def recall(self, query: RecallQuery, *, request_id: str = "") -> RecallResult:
        """Recalls, in a span with a child per stage (embed, each channel, fuse, rank, rerank, pack) and
        with its latency recorded for the p99 target (telemetry.recorder). An audited tenant's recall is
        recorded (pipelines/audit.py: buffered, never waited for) under the call's `request_id`."""
        with self._recorder.recall() as span:
            result = await self._recall(query)
            span.set_attribute("hindsight.hits", len(result.hits))
            span.set_attribute("hindsight.tokens_used", result.tokens_used)
            span.set_attribute("hindsight.channels_degraded", [c.value for c in result.channels_degraded])
        if self._audit is not None and self._audit.audits(query.tenant_id):
            self._audit.record(
                query.tenant_id,
                request_id=request_id,
                subject=query.subject,
                agent_id=query.agent_id,
                query_text=query.text,  # as asked, before a dialogue is narrowed to its user turns
                returned_ids=tuple(hit.memory.id for hit in result.hits),
                packed_ids=tuple(hit.memory.id for hit in result.hits if hit.packed),
            )
        return result

    async def _recall(self, query: RecallQuery) -> RecallResult:
        validate_recall(query, self._settings.limits)
        policy = self._settings.policy
        plan = await self._plan(query)
        query = plan.query

        # The server's index of the subject, where it holds one: brought up to date from the primary
        # here, before the route chooses where the rest reads, so it is never behind a replica and its
        # look is not counted against a replica's read time.
        held: ScopeIndex | None = None
        if self._hot is not None:
            with stage("recall.hot_scope") as span:
                held = await self._hot.index_for(plan.scope)
                span.set_attribute("hindsight.held", held is not None)
            searches = self._hot.vector_searches

        async def search(store: RecallStore) -> tuple[list[ChannelResult], list[RankedMemory]]:
            """What reads the database, on the replica or primary the route chose (it runs again on
            the primary when a replica fails under it); the index's channels instead, when held."""
            if held is not None:
                store = IndexedReads(store, held, searches, primary=self._reads.on_primary(store))
            results, vectors = await _run_channels(self._channels(store, plan))
            with stage("recall.fuse") as span:
                candidates = reciprocal_rank_fusion(results, k=policy.rrf_k, limit=policy.max_candidates)
                span.set_attribute("hindsight.candidates", len(candidates))
            rare = next((r.rare_terms for r in results if r.channel is Channel.LEXICAL), ())
            ranked, context = await self._rank(store, plan, candidates, vectors, rare)
            return ([*results, context] if context is not None else results), ranked

        try:
            results, ranked = await self._reads.read(query.read_after, search)
        finally:
            if plan.embedding is not None and not plan.embedding.done():
                plan.embedding.cancel()  # the recall failed before the vector channel used it
        ranked, was_reranked = await self._rerank(query, ranked, plan.rerank_depth)
        with stage("recall.pack") as span:
            kept = [hit for hit in ranked if hit.score.final >= query.min_score][: query.top_k]
            packed = pack(
                [PackItem(hit.memory, hit.directly_relevant) for hit in kept],
                query.token_budget,
            )
            span.set_attribute("hindsight.packed", len(packed.packed_ids))
        hits = [replace(hit, packed=hit.memory.id in packed.packed_ids) for hit in kept]
        if self._access is not None:
            self._access.record(query.tenant_id, [hit.memory.id for hit in hits])
        embedded = plan.embedded
        spoken = plan.spoken
        return RecallResult(
            hits=hits,
            injection_text=packed.text,
            tokens_used=packed.tokens,
            channels_used=[r.channel for r in results if not r.error],
            channels_degraded=[r.channel for r in results if r.error],
            window=query.window if spoken is None else spoken.window,
            channel_results=results,
            weights=query.weights,
            profile=query.profile,
            query_truncated=(embedded is not None and embedded.truncated) or plan.focused.turns_left_out > 0,
            reranked=was_reranked,
        )

    async def _plan(self, query: RecallQuery) -> RecallPlan:
        """Understands the query, sizes its scope and starts embedding it."""
        # Milliseconds of regular expressions over a maximal query: off the loop (offload.py).
        query, focused, spoken = await run_pure(len(query.text), _understood, query)
        scope = Scope.of(query)
        # Usually cached; counted on a scope's first recall on this server.
        size = await self._scope_sizes.of(scope.tenant_id, scope.subject) if self._inference else None
        spaces = self._spaces_for(query.text, size)
        companion = self._companion_for(query.text, spaces)
        policy = self._settings.policy
        if spaces[0] is VectorSpace.ENGLISH:
            lexical_weight = policy.english_lexical_weight
        else:
            lexical_weight = policy.lexical_weight.get(language(query.text), 0.5)
        return RecallPlan(
            query=query,
            focused=focused,
            spoken=spoken,
            scope=scope,
            size=size,
            spaces=spaces,
            embedding=self._start_query_embedding(query.tenant_id, focused, spaces, companion),
            lexical_weight=lexical_weight,
            rerank_depth=self._rerank_depth(query),
            companion=companion,
        )

    def _rerank_depth(self, query: RecallQuery) -> int:
        return self.rerank_load(query.text, query.profile)[0]

    def rerank_load(self, text: str, profile: str) -> tuple[int, bool]:
        """How many (query, passage) pairs the cross-encoder scores for such a recall while the tier is as
        it is now, and whether it runs on a GPU: what admission weighs the call by before it runs. Admission
        asks before validation, so only what a valid query may hold is read (a longer one is refused)."""
        inference = self._inference
        if inference is None or not inference.can_rerank:
            return 0, False
        on_gpu = inference.rerank_on_gpu
        text = text[: self._settings.limits.max_query_bytes]
        return rerank_depth(text, profile, self._settings.policy, on_gpu=on_gpu), on_gpu

    @staged("recall.rerank")
    async def _rerank(
        self, query: RecallQuery, ranked: list[RankedMemory], depth: int
    ) -> tuple[list[RankedMemory], bool]:
        """Rescores the `depth` best candidates with the tier's cross-encoder, when the plan asked for it
        and it answers in time."""
        if self._inference is None or not depth or not ranked:
            return ranked, False
        head, tail = ranked[:depth], ranked[depth:]
        try:
            logits = await self._inference.rerank(
                query.text, [hit.memory.content for hit in head], self._settings.rerank_timeout_s
            )
        except InferenceUnavailable:
            return ranked, False  # answer without it rather than late
        return ranking.reranked(head, logits, tail, self._settings.policy.rerank_weight, query.weights), True

    def _spaces_for(self, text: str, size: ScopeSize | None) -> tuple[VectorSpace, ...]:
        """The vector spaces a query is compared in, preferred first. An English query is judged by the
        English model where a memory has its vector, by the multilingual one elsewhere (Chinese
        memories: found across languages), which it skips when the scope has no memory without an
        English vector (one user's English memory: one query embedding and one search instead of two);
        anything else (or the English model away) by the multilingual model alone, which covers every
        memory."""
        english = self._inference is not None and self._inference.serves(VectorSpace.ENGLISH)
        if not english or language(text) != ENGLISH:
            return (VectorSpace.MULTILINGUAL,)
        if size is not None and size.without_english == 0:
            return (VectorSpace.ENGLISH,)
        return (VectorSpace.ENGLISH, VectorSpace.MULTILINGUAL)

    def _companion_for(self, text: str, spaces: tuple[VectorSpace, ...]) -> VectorSpace | None:
        """A Chinese query is also compared in the Chinese space, when the tier serves it: its model and
        the multilingual one see Chinese differently, and their cosines together rank better than
        either (MADial dev, BENCHMARKS.md). A query judged by the English model is also compared with
        the memories read after the turn before them (VectorSpace.ENGLISH_CONTEXT), by the same query
        vector. A memory without a vector in the companion space is judged by its other cosine alone."""
        if self._inference is None:
            return None
        if spaces[0] is VectorSpace.ENGLISH:
            context = self._inference.serves(VectorSpace.ENGLISH_CONTEXT)
            return VectorSpace.ENGLISH_CONTEXT if context else None
        chinese = self._inference.serves(VectorSpace.CHINESE)
        return VectorSpace.CHINESE if chinese and language(text) == CHINESE else None

    def _start_query_embedding(
        self,
        tenant_id: str,
        focused: QueryFocus,
        spaces: tuple[VectorSpace, ...],
        companion: VectorSpace | None,
    ) -> asyncio.Task[QueryVectors] | None:
        """Starts embedding the query (and a dialogue's user turns) at once, so it overlaps the
        database channels."""
        if self._inference is None:
            return None
        return asyncio.ensure_future(self._embed(self._inference, tenant_id, focused, spaces, companion))

    async def _embed(
        self,
        inference: RecallInference,
        tenant_id: str,
        focused: QueryFocus,
        spaces: tuple[VectorSpace, ...],
        companion: VectorSpace | None,
    ) -> QueryVectors:
        texts = (focused.text, *focused.turns)
        # The companion embeds the joined text only: a second model's pass over each turn too cost 3x
        # the tier's CPU and missed the query deadline under load (MADial dev: R@5 65.3 with the
        # turns, the companion late for 70% of recalls; 69.8 without them; BENCHMARKS.md).
        companion_texts = texts[:1]
        shares_model = companion is VectorSpace.ENGLISH_CONTEXT
        asked = len(texts) * len(spaces) + (len(companion_texts) if companion and not shares_model else 0)
        with stage("recall.embed", **{"hindsight.texts": asked}) as span:
            judging = _gathered([self._space_query(inference, tenant_id, space, texts) for space in spaces])
            if companion is None:
                judged, second = await judging, None
            elif companion is VectorSpace.ENGLISH_CONTEXT:  # the English model's: its query serves both
                judged = await judging
                second = judged[spaces.index(VectorSpace.ENGLISH)]
            else:
                judged, second = await asyncio.gather(
                    judging, self._companion_query(inference, tenant_id, companion, companion_texts)
                )
            span.set_attribute("hindsight.cache_hit", all(query.cached for query in judged))
            span.set_attribute("hindsight.companion_missed", companion is not None and second is None)
        return QueryVectors(
            dict(zip(spaces, judged, strict=True)),
            any(query.truncated for query in judged),
            None if second is None or companion is None else (companion, second),
        )

    async def _space_query(
        self, inference: RecallInference, tenant_id: str, space: VectorSpace, texts: Sequence[str]
    ) -> SpaceQuery:
        """The texts' embeddings in one space: the joined text, then a dialogue's turns."""
        timeout_s = self._settings.query_timeout_s
        embedded = await _gathered([inference.embed_query(t, timeout_s, space, tenant_id) for t in texts])
        return SpaceQuery(
            embedded[0].vector,
            np.stack([e.vector for e in embedded[1:]]) if len(embedded) > 1 else None,
            truncated=any(e.truncated for e in embedded),
            cached=all(e.cached for e in embedded),
        )

    async def _companion_query(
        self, inference: RecallInference, tenant_id: str, companion: VectorSpace | None, texts: Sequence[str]
    ) -> SpaceQuery | None:
        """The companion space's query, None when there is none or it did not come in time: the recall
        then judges by the first space alone (said in the embed stage's span)."""
        if companion is None:
            return None
        try:
            return await self._space_query(inference, tenant_id, companion, texts)
        except InferenceUnavailable:
            return None

    def _channels(self, store: RecallStore, plan: RecallPlan) -> dict[Channel, ChannelRun]:
        """Every channel reads the memories' vectors in the query's spaces, to score all candidates alike."""
        policy = self._settings.policy
        limit = policy.channel_limit
        query, scope, spoken = plan.query, plan.scope, plan.spoken
        spaces = plan.read_spaces
        channels: dict[Channel, ChannelRun] = {}
        if plan.embedding is not None and plan.size is not None:
            query_vector, size = plan.embedding, plan.size

            async def vector() -> ChannelRows:
                embedded = await query_vector
                # After an English search, the multilingual one looks only where it cannot.
                english_covers = VectorSpace.ENGLISH in embedded.by_space
                quota = split_limit(limit, size) if len(embedded.by_space) > 1 else {plan.spaces[0]: limit}
                judged = _gathered(
                    [
                        store.vector_channel(
                            scope,
                            q.main,
                            quota[space],
                            space,
                            spaces,
                            exact=prefers_exact_search(
                                size.searched(space, english_covers),
                                size.table_rows,
                                policy.exact_search_factor,
                            ),
                            without_english=space is VectorSpace.MULTILINGUAL and english_covers,
                        )
                        for space, q in embedded.by_space.items()
                    ]
                )
                # The English context space searches nothing of its own: its vectors re-judge the
                # candidates the English search found (a search of its own there cost a recall ~1.5 ms
                # of the server's CPU for R@5 / R@10 within a run's spread on LoCoMo dev; BENCHMARKS.md).
                if embedded.companion is None or embedded.companion[0] is VectorSpace.ENGLISH_CONTEXT:
                    return _judged_by_best_space(await judged, plan.spaces)
                space, q = embedded.companion
                # Its rows: the scope's with a vector there, at most all of it (no count of them is kept).
                exact = prefers_exact_search(size.rows, size.table_rows, policy.exact_search_factor)
                searches, second = await asyncio.gather(
                    judged, store.vector_channel(scope, q.main, limit, space, spaces, exact=exact)
                )
                return _with_companion(_judged_by_best_space(searches, plan.spaces), second, policy.rrf_k)

            channels[Channel.VECTOR] = vector
        terms = query_terms(query.text)[-policy.max_query_terms :]  # a long dialogue: its latest words
        if terms:
            bm25 = Bm25(
                policy.bm25_k1,
                policy.bm25_b,
                policy.common_term_share,
                policy.bm25_match_terms,
                policy.bm25_match_rows,
                policy.rare_term_df,
                policy.rare_term_min_documents,
            )
            channels[Channel.LEXICAL] = lambda: store.lexical_channel(scope, terms, limit, bm25, spaces)
        # A vague time ("上次", "recently") only prefers recent memories, which the final score does;
        # as a filter it would add the newest memories whatever they are about (gated out later).
        if query.entities or not query.window.is_open or (spoken is not None and not spoken.vague):
            # A time the query speaks of narrows this channel only: the others still search everywhere,
            # so a memory filed a day off is not lost. An explicit time_range narrows every channel.
            in_time = scope if spoken is None else replace(scope, window=spoken.window)
            channels[Channel.STRUCTURED] = lambda: store.structured_channel(
                in_time, query.entities, limit, spaces
            )
        if query.session_id:
            # The primary's: the turns of the conversation in progress are the freshest data there is.
            channels[Channel.SESSION] = lambda: self._store.session_channel(
                scope, query.session_id, limit, spaces
            )
        return channels

    @staged("recall.rank")
    async def _rank(
        self,
        store: RecallStore,
        plan: RecallPlan,
        fused: list[FusedCandidate],
        vectors: Vectors,
        rare_terms: tuple[str, ...],
    ) -> tuple[list[RankedMemory], ChannelResult | None]:
        """Scores the fused candidates and the turns around the strong ones (domain/ranking.py) and
        drops the irrelevant; also returns the context stage's result when it ran."""
        policy = self._settings.policy
        query_vector = plan.embedded
        candidates = _measured(fused, vectors, query_vector, policy)
        around: Around = {}
        context: ChannelResult | None = None
        if policy.context_weight > 0:
            strong = ranking.strongest(candidates, plan.lexical_weight, policy.context_candidates)
            if strong:
                known = {c.memory.id for c in candidates}
                added, added_vectors, around, context = await self._context(store, plan, strong, known)
                candidates += _measured(added, added_vectors, query_vector, policy, from_context=True)
        query = plan.query
        rank_query = ranking.RankQuery(
            weights=query.weights,
            entities=query.entities,
            now=query.now,
            spoken_window=plan.time_window,
            lexical_weight=plan.lexical_weight,
            context_weight=policy.context_weight,
            recency_half_life=policy.recency_half_life,
            rare_terms=rare_terms,
            answer_weight=policy.answer_weight,
            spoken_time_lift=policy.spoken_time_lift,
            named_subject_lift=policy.named_subject_lift,
            text=unicodedata.normalize("NFKC", query.text).casefold(),
        )
        # What the rest of the recall reads: top_k, after the rerank (when the plan has one) has
        # reordered its head and the min_score cut.
        keep = query.top_k + plan.rerank_depth
        return ranking.rank(candidates, around, rank_query, keep), context

    async def _context(
        self, store: RecallStore, plan: RecallPlan, strong: list[str], known: set[str]
    ) -> tuple[list[FusedCandidate], Vectors, Around, ChannelResult]:
        """The turns right before and after the strong candidates that are not candidates yet, their
        vectors, each strong one's neighbours, and the stage's channel result."""
        with stage("recall.channel.context") as span:
            started = time.perf_counter()
            rows, around = await store.adjacent_turns(plan.scope, strong, plan.read_spaces)
            added = [hit for hit in rows.hits if hit.memory.id not in known]
            span.set_attribute("hindsight.rows", len(added))
        result = ChannelResult(Channel.CONTEXT, added, (time.perf_counter() - started) * 1000)
        fused = [FusedCandidate(hit.memory, {Channel.CONTEXT: hit}, 0.0) for hit in added]
        return fused, rows.vectors, around, result


async def _gathered(awaitables: Sequence[Awaitable[T]]) -> list[T]:
    """`asyncio.gather`'s results, without its task for the usual single awaitable (a recall's one
    vector space, one text): each task costs the loop a few callbacks, and a recall made a dozen."""
    if len(awaitables) == 1:
        return [await awaitables[0]]
    return list(await asyncio.gather(*awaitables))


def _measured(
    fused: list[FusedCandidate],
    vectors: Vectors,
    query_vector: QueryVectors | None,
    policy: RecallPolicy,
    *,
    from_context: bool = False,
) -> list[ranking.Candidate]:
    """The candidates with their signals: the lexical channel's BM25 score, and the cosine in the best
    space each has a vector in, judged against that model's calibration."""
    min_similarity = {
        VectorSpace.MULTILINGUAL: policy.min_similarity,
        VectorSpace.ENGLISH: policy.english_min_similarity,
    }
    ids = [candidate.memory.id for candidate in fused]
    similarities = [None] * len(fused) if query_vector is None else query_vector.similarities(ids, vectors)
    companions = [None] * len(fused) if query_vector is None else query_vector.companion_cosines(ids, vectors)
    measured = []
    for candidate, judged, companion in zip(fused, similarities, companions, strict=True):
        measured.append(
            ranking.Candidate(
                candidate.memory,
                candidate.channels,
                candidate.fusion,
                lexical=_channel_score(candidate, Channel.LEXICAL),
                dense=None if judged is None else judged[0],
                min_similarity=math.inf if judged is None else min_similarity[judged[1]],
                companion=companion,
                from_context=from_context,
            )
        )
    return measured


def _merged(*parts: Vectors) -> Vectors:
    """The vectors of every part, by space (a memory's vector is the same in each part that has it)."""
    merged: Vectors = {}
    for part in parts:
        for space, by_id in part.items():
            merged.setdefault(space, {}).update(by_id)
    return merged


def _judged_by_best_space(searches: list[ChannelRows], spaces: tuple[VectorSpace, ...]) -> ChannelRows:
    """One vector channel from a search per space (preferred first): a later space contributes only
    memories the earlier ones have no vector for (an English query's Chinese memories), so each
    memory is ranked by the best model that covers it."""
    hits = list(searches[0].hits)
    vectors = _merged(*(rows.vectors for rows in searches))
    seen = {hit.memory.id for hit in hits}
    for later, rows in enumerate(searches[1:], start=1):
        covered = set().union(*(rows.vectors.get(space, {}) for space in spaces[:later]))
        hits += [hit for hit in rows.hits if hit.memory.id not in covered and hit.memory.id not in seen]
    return ChannelRows([replace(hit, rank=rank) for rank, hit in enumerate(hits, start=1)], vectors)


def _with_companion(judged: ChannelRows, companion: ChannelRows, k: int) -> ChannelRows:
    """The vector channel's hits and the companion space's search as one ranking, by reciprocal rank
    (each list's rank r adds 1 / (k + r)); a memory in both keeps its judged hit."""
    score: dict[str, float] = {}
    hit_of: dict[str, ChannelHit] = {}
    for rows in (judged, companion):
        for rank, hit in enumerate(rows.hits, start=1):
            score[hit.memory.id] = score.get(hit.memory.id, 0.0) + 1.0 / (k + rank)
            hit_of.setdefault(hit.memory.id, hit)
    order = sorted(score, key=lambda memory_id: -score[memory_id])  # stable: ties keep the judged order
    hits = [replace(hit_of[memory_id], rank=rank) for rank, memory_id in enumerate(order, start=1)]
    return ChannelRows(hits, _merged(judged.vectors, companion.vectors))


def _understood(query: RecallQuery) -> tuple[RecallQuery, QueryFocus, TimeExpression | None]:
    """The query narrowed to the user's turns (a dialogue's), and the time it speaks of."""
    focused = focus(query.text)
    query = replace(query, text=focused.text)
    return query, focused, _spoken_time(query)


def _spoken_time(query: RecallQuery) -> TimeExpression | None:
    """The time the query speaks of ("上周三", "last Friday"), unless the caller gave a time_range."""
    return parse_time(query.text, query.now) if query.window.is_open else None


def _channel_score(candidate: FusedCandidate, channel: Channel) -> float | None:
    hit = candidate.channels.get(channel)
    return None if hit is None else hit.score


async def _run_channels(
    channels: dict[Channel, ChannelRun],
) -> tuple[list[ChannelResult], Vectors]:
    async def timed(channel: Channel, run: ChannelRun) -> tuple[ChannelResult, Vectors]:
        with stage(f"recall.channel.{channel.value}") as span:
            started = time.perf_counter()
            try:
                rows = await run()
            except InferenceUnavailable as exc:  # degrade: the other channels still answer
                span.set_attribute("hindsight.degraded", True)
                failed = ChannelResult(channel, [], (time.perf_counter() - started) * 1000, error=str(exc))
                return failed, {}
            span.set_attribute("hindsight.rows", len(rows.hits))
        elapsed_ms = (time.perf_counter() - started) * 1000
        return ChannelResult(channel, rows.hits, elapsed_ms, rare_terms=rows.rare_terms), rows.vectors

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(timed(channel, run)) for channel, run in channels.items()]
    except ExceptionGroup as errors:
        # The database is shared by every channel: when one cannot read, the recall cannot answer.
        known = errors.subgroup(HindsightError)
        if known is None:
            raise
        raise known.exceptions[0] from None
    return [task.result()[0] for task in tasks], _merged(*(task.result()[1] for task in tasks))
