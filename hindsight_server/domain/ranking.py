"""Recall's ranking of fused candidates: each one's signals, the relevance gate, and the score breakdown.

The recall pipeline measures the signals (a memory's BM25 score from the lexical channel, its cosine
in the best vector space it has a vector in) and fetches the turns around the strongest candidates
(the context stage); everything decided from them is here, without I/O.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import lru_cache

from hindsight_server.domain import scoring
from hindsight_server.domain.dialogue import ends_asking
from hindsight_server.domain.model import (
    Channel,
    ChannelHit,
    Entities,
    Memory,
    RankedMemory,
    ScoreBreakdown,
    ScoreWeights,
    TimeWindow,
)

Around = Mapping[str, tuple[str | None, str | None]]  # memory id -> (the turn before, the turn after)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A fused candidate with what was measured of it."""

    memory: Memory
    channels: Mapping[Channel, ChannelHit]
    fusion: float  # its reciprocal-rank fusion score
    lexical: float | None = None  # its BM25 score, when the lexical channel found it
    dense: float | None = None  # its cosine to the query, when it has a vector in a searched space
    min_similarity: float = math.inf  # the cosine that counts as a match in that space's model
    companion: float | None = None  # its cosine in the query's companion space, when both have one
    from_context: bool = False  # added by the context stage (a turn next to a strong candidate)

    @property
    def matches(self) -> bool:
        """It matches the query's words or meaning by itself (a context turn is judged by its
        neighbour, not by itself)."""
        return not self.from_context and scoring.matches_query(self.lexical, self.dense, self.min_similarity)


@dataclass(frozen=True, slots=True)
class RankQuery:
    """What of the recall the ranking needs."""

    weights: ScoreWeights
    entities: Entities
    now: datetime
    spoken_window: TimeWindow | None  # the (not vague) time the query speaks of
    lexical_weight: float  # BM25's share of the similarity (by the query's language)
    context_weight: float
    recency_half_life: timedelta
    rare_terms: tuple[str, ...] = ()  # the query's terms rare in the tenant (domain/bm25.py)
    answer_weight: float = 0.0  # the share of a question the turn after it borrows
    spoken_time_lift: float = 0.0  # deviations of the mix a memory inside spoken_window gains
    named_subject_lift: float = 0.0  # deviations a memory gains when the query names its subject
    text: str = ""  # the query, NFKC-normalised and casefolded (where a subject is looked for)


def _mix(candidates: Sequence[Candidate], lexical_weight: float) -> list[float]:
    return scoring.hybrid_mix(
        [c.lexical for c in candidates],
        [c.dense for c in candidates],
        lexical_weight,
        [c.companion for c in candidates],
    )


def strongest(candidates: Sequence[Candidate], lexical_weight: float, count: int) -> list[str]:
    """The ids of the `count` best candidates that match the query: those whose neighbouring turns the
    context stage adds."""
    mix = _mix(candidates, lexical_weight)
    matching = sorted((i for i, c in enumerate(candidates) if c.matches), key=lambda i: -mix[i])
    return [candidates[i].memory.id for i in matching[:count]]


def is_relevant(candidate: Candidate, context_of: Set[str], entities: Entities) -> bool:
    """Only relevant memories are returned, however recent: one that matches the query's words or
    meaning, sits next to a turn that does, belongs to the ongoing session, or carries an entity the
    caller asked for."""
    return (
        candidate.matches
        or candidate.memory.id in context_of
        or Channel.SESSION in candidate.channels
        or scoring.shares_an_entity(entities, candidate.memory.entities)
    )


def exact_evidence(candidate: Candidate, rare_terms: Sequence[str]) -> float:
    """The share of the query's rare terms the memory holds. Only the lexical channel's candidates can
    hold one: rare terms select its candidates."""
    if not rare_terms or Channel.LEXICAL not in candidate.channels:
        return 0.0
    text = unicodedata.normalize("NFKC", candidate.memory.content).casefold()
    return sum(1 for term in rare_terms if _finder(term)(text)) / len(rare_terms)


@lru_cache(maxsize=1024)
def _finder(term: str) -> Callable[[str], bool]:
    """Whether a normalised text holds the lexical term: a word as a whole word (bounded by anything but
    letters and digits of its own script: "订单abc123下周" holds "abc123"), CJK characters as they are.
    Compiled once per term (a recall asks it of every candidate, and a tenant's rare terms and subjects
    recur from recall to recall); bounded, shared by every tenant, a function of the term alone."""
    if not term.isascii():
        return lambda text: term in text
    search = re.compile(rf"(?<![a-z0-9]){re.escape(term)}(?![a-z0-9])").search
    return lambda text: search(text) is not None


def rank(
    candidates: Sequence[Candidate], around: Around, query: RankQuery, keep: int | None = None
) -> list[RankedMemory]:
    """Scores the relevant candidates, best first (ties: fusion, then id); the best `keep` of them
    when given (a recall returns a few of its ~70 candidates). A candidate's similarity is
    its hybrid mix plus the best its neighbours lend (_adjacent), plus what the query names (the time,
    spoken_time_lift, and the subject, named_subject_lift, in deviations of the mix), relative to the
    best candidate's.

    Exact evidence comes first: a memory holding the query's rare terms (an order number, a code) is
    lifted by its share of them times the whole spread of the mix and one deviation more, so it ranks
    above every memory that only resembles the query (a vector's near-identical neighbours), and
    recency or tier cannot undo it (they move a score by at most its similarity's share)."""
    own = _mix(candidates, query.lexical_weight)
    borrowed = scoring.with_context(own, _adjacent(candidates, around, query), query.context_weight)
    named = _named_subjects(candidates, query)
    lifts = [_lift(candidate, query, named) for candidate in candidates]
    mix = [score + lift for score, lift in zip(borrowed, lifts, strict=True)]
    evidence = [exact_evidence(candidate, query.rare_terms) for candidate in candidates]
    if any(evidence):
        spread = max(mix) - min(mix) + _EVIDENCE_MARGIN
        mix = [score + share * spread for score, share in zip(mix, evidence, strict=True)]
    context_of = {n for pair in around.values() for n in pair if n}
    similarities = scoring.relative_to_best(mix)
    weights = query.weights.normalised()  # once, not per candidate
    relevant = [i for i, c in enumerate(candidates) if is_relevant(c, context_of, query.entities)]
    # The order needs each final score only; the breakdown is built for the kept few (of ~70).
    final = {i: _final(candidates[i], similarities[i], query, weights) for i in relevant}
    relevant.sort(key=lambda i: _order_key(final[i], candidates[i].fusion, candidates[i].memory.id))
    return [
        RankedMemory(
            candidates[i].memory,
            candidates[i].channels,
            breakdown(
                candidates[i],
                similarities[i],
                query,
                evidence[i],
                context_lift=borrowed[i] - own[i],
                query_lift=lifts[i],
                weights=weights,
            ),
            directly_relevant=candidates[i].matches,
        )
        for i in relevant[:keep]
    ]


def _adjacent(
    candidates: Sequence[Candidate], around: Around, query: RankQuery
) -> list[list[tuple[int, float]]]:
    """Each candidate's adjacent turns among the candidates with the share it borrows from each. The
    context stage found the turns around the strong candidates: a strong one borrows context_weight of
    each. A turn that ends asking a question lends answer_weight to the turn after it, strong or not:
    that turn answers what the query matched, usually in other words."""
    position = {c.memory.id: i for i, c in enumerate(candidates)}
    shares: list[dict[int, float]] = [{} for _ in candidates]

    def lend(lender: str | None, borrower: str | None, share: float) -> None:
        if lender in position and borrower in position and share > 0:
            into = shares[position[borrower]]
            into[position[lender]] = max(share, into.get(position[lender], 0.0))

    for memory_id, (previous, following) in around.items():
        for neighbour in (previous, following):
            lend(neighbour, memory_id, query.context_weight)
        for earlier, later in ((previous, memory_id), (memory_id, following)):
            if earlier in position and ends_asking(candidates[position[earlier]].memory.content):
                lend(earlier, later, query.answer_weight)
    return [sorted(share.items()) for share in shares]


def _named_subjects(candidates: Sequence[Candidate], query: RankQuery) -> frozenset[str]:
    """The candidates' subjects the query names, each looked for once."""
    if not query.named_subject_lift:
        return frozenset()
    subjects = {c.memory.subject for c in candidates if c.memory.subject}
    return frozenset(subject for subject in subjects if names(query.text, subject))


def _lift(candidate: Candidate, query: RankQuery, named: Set[str]) -> float:
    """What the query's own structure adds to a candidate's mix: the time it names, the subject it names."""
    memory = candidate.memory
    window = query.spoken_window
    in_time = window is not None and window.holds(memory.valid_from or memory.created_at)
    return query.spoken_time_lift * in_time + query.named_subject_lift * (memory.subject in named)


def names(text: str, subject: str) -> bool:
    """The normalised query `text` names `subject` (a whole word of it, or as written in CJK)."""
    return _finder(unicodedata.normalize("NFKC", subject).casefold())(text)


# Beyond the spread: e^-2 in similarity, more than recency and tier can make up (at most 1 / w_sim,
# 2.5 with the default weights).
_EVIDENCE_MARGIN = 2.0


def best_first(hits: Iterable[RankedMemory]) -> list[RankedMemory]:
    """The final order (_order_key)."""
    return sorted(hits, key=lambda hit: _order_key(hit.score.final, hit.score.fusion, hit.memory.id))


def _order_key(final: float, fusion: float, memory_id: str) -> tuple[float, float, str]:
    """The best score first, then the best fusion, then the id (a stable answer)."""
    return (-final, -fusion, memory_id)


def breakdown(
    candidate: Candidate,
    similarity: float,
    query: RankQuery,
    evidence: float = 0.0,
    *,
    context_lift: float = 0.0,
    query_lift: float = 0.0,
    weights: ScoreWeights | None = None,
) -> ScoreBreakdown:
    """The design's components (docs/design.md) and the final score, before any rerank. `weights`:
    query.weights normalised, when the caller has them already."""
    recency, tier_priority, entity_match = components = _components(candidate.memory, query)
    final = _gated(similarity, components, weights or query.weights.normalised())
    return ScoreBreakdown(
        similarity=similarity,
        recency=recency,
        tier_priority=tier_priority,
        entity_match=entity_match,
        fusion=candidate.fusion,
        rerank=0.0,
        final=final,
        exact_evidence=evidence,
        context_lift=context_lift,
        query_lift=query_lift,
    )


def _components(memory: Memory, query: RankQuery) -> tuple[float, float, float]:
    """A memory's recency, tier priority and entity match for the query."""
    entity_match = scoring.entity_match(
        query.entities, memory.entities, query.spoken_window, memory.valid_from or memory.created_at
    )
    recency = scoring.recency(memory.created_at, query.now, query.recency_half_life)
    return recency, scoring.TIER_PRIORITY[memory.tier], entity_match


def _final(candidate: Candidate, similarity: float, query: RankQuery, weights: ScoreWeights) -> float:
    """The final score `breakdown` gives, without the breakdown."""
    return _gated(similarity, _components(candidate.memory, query), weights)


def _gated(similarity: float, components: tuple[float, float, float], weights: ScoreWeights) -> float:
    recency, tier_priority, entity_match = components
    return scoring.gated(
        weights,
        similarity=similarity,
        recency=recency,
        tier_priority=tier_priority,
        entity_match=entity_match,
    )


def rescored(hit: RankedMemory, logit: float, rerank_weight: float, weights: ScoreWeights) -> RankedMemory:
    """A hit after the cross-encoder: its logit blended into the similarity, the final score again."""
    s = hit.score
    similarity = scoring.reranked(s.similarity, logit, rerank_weight)
    final = scoring.weighted(
        weights,
        similarity=similarity,
        recency=s.recency,
        tier_priority=s.tier_priority,
        entity_match=s.entity_match,
    )
    rerank = 1 / (1 + math.exp(-logit))
    return replace(hit, score=replace(s, similarity=similarity, rerank=rerank, final=final))


def reranked(
    head: Sequence[RankedMemory],
    logits: Sequence[float],
    tail: Sequence[RankedMemory],
    rerank_weight: float,
    weights: ScoreWeights,
) -> list[RankedMemory]:
    """The head rescored with its cross-encoder logits and reordered among itself, then the tail as it
    was. The cross-encoder judged the head only: a candidate it finds poor falls within the head, never
    below one it did not judge (merged with the tail by score, LoCoMo dev R@10 fell 73.9 -> 71.9 at
    depth 10). The tail's scores can then exceed the last head's; the order is the answer."""
    judged = [rescored(hit, logit, rerank_weight, weights) for hit, logit in zip(head, logits, strict=True)]
    # Exact evidence stays first: the cross-encoder reads words, and "order 3F9A0C21DE" and "order
    # 7B2E11F0AA" read alike to it.
    return [*sorted(best_first(judged), key=lambda hit: -hit.score.exact_evidence), *tail]  # stable sort
