"""Recall's ranking (domain/ranking.py): the relevance gate, the context turns, the score breakdown."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.model import Channel, ChannelHit, Tier, TimeWindow
from hindsight_server.domain.policy import DEFAULT_PROFILES
from hindsight_server.domain.ranking import (
    Candidate,
    RankQuery,
    exact_evidence,
    is_relevant,
    rank,
    reranked,
    rescored,
    strongest,
)
from tests.domain.builders import memory

NOW = datetime(2024, 3, 20, tzinfo=UTC)
QUERY = RankQuery(
    weights=DEFAULT_PROFILES["default"],
    entities={},
    now=NOW,
    spoken_window=None,
    lexical_weight=0.3,
    context_weight=0.5,
    recency_half_life=timedelta(days=30),
)


def candidate(n: int, *, channels: tuple[Channel, ...] = (Channel.LEXICAL,), **signals: Any) -> Candidate:
    m = memory(id=f"m{n}", created_at=NOW - timedelta(days=n))
    hits = {channel: ChannelHit(m, 1, 0.0) for channel in channels}
    return Candidate(m, hits, 1.0 / (60 + n), **signals)


@pytest.mark.parametrize(
    ("signals", "matches"),
    [
        ({"lexical": 2.5}, True),  # a BM25 match
        ({"lexical": 0.0}, False),  # matched only common terms
        ({"dense": 0.45, "min_similarity": 0.4}, True),  # close enough in meaning for its model
        ({"dense": 0.35, "min_similarity": 0.4}, False),
        ({"dense": 0.35}, False),  # no vector in a searched space: no threshold to pass
        ({"lexical": 2.5, "from_context": True}, False),  # a context turn is judged by its neighbour
    ],
)
def test_a_candidate_matches_by_its_words_or_its_meaning(signals: dict[str, Any], matches: bool) -> None:
    assert candidate(1, **signals).matches is matches


@pytest.mark.parametrize(
    ("built", "context_of", "entities", "relevant"),
    [
        (candidate(1, lexical=1.0), set(), {}, True),
        (candidate(1), set(), {}, False),  # found, but matches nothing: never returned, however recent
        (candidate(1), {"m1"}, {}, True),  # next to a turn that matches
        (candidate(1, channels=(Channel.SESSION,)), set(), {}, True),  # the ongoing session
        (candidate(1), set(), {"city": "Lisbon"}, False),
    ],
)
def test_only_relevant_candidates_pass_the_gate(
    built: Candidate, context_of: set[str], entities: dict[str, str], relevant: bool
) -> None:
    assert is_relevant(built, context_of, entities) is relevant


def test_a_candidate_carrying_a_wanted_entity_is_relevant() -> None:
    with_entity = Candidate(memory(id="m1", entities={"city": "lisbon "}), {}, 0.0)
    assert is_relevant(with_entity, set(), {"city": "Lisbon"})


def test_the_strongest_matching_candidates_get_their_context() -> None:
    candidates = [
        candidate(1, lexical=1.0),
        candidate(2, lexical=5.0),
        candidate(3),  # does not match: never expanded
        candidate(4, lexical=3.0),
    ]
    assert strongest(candidates, 0.3, 2) == ["m2", "m4"]
    assert strongest(candidates, 0.3, 10) == ["m2", "m4", "m1"]
    assert strongest([candidate(1)], 0.3, 2) == []


def test_ranking_drops_the_irrelevant_and_keeps_the_turn_next_to_a_match() -> None:
    best = candidate(1, lexical=6.0)
    weak = candidate(2, lexical=1.0)
    unrelated = candidate(3)
    turn_after = candidate(4, from_context=True)
    ranked = rank([best, weak, unrelated, turn_after], {"m1": (None, "m4")}, QUERY)
    # m3 matches nothing; m4 neither, but it is the turn right after the best match.
    assert [hit.memory.id for hit in ranked] == ["m1", "m2", "m4"]
    assert [hit.directly_relevant for hit in ranked] == [True, True, False]
    top = ranked[0].score
    assert top.similarity == pytest.approx(1.0)  # relative to the best candidate
    assert top.recency == pytest.approx(0.5 ** (1 / 30))
    assert top.tier_priority == pytest.approx(0.3)  # semantic
    assert 0 < ranked[2].score.final < ranked[1].score.final < top.final
    # Without its neighbour known, the context turn is not returned.
    assert [hit.memory.id for hit in rank([best, weak, unrelated, turn_after], {}, QUERY)] == ["m1", "m2"]


def test_a_match_borrows_from_its_neighbours_by_the_context_weight() -> None:
    lone, framed = candidate(1, lexical=2.0), candidate(2, lexical=2.0)
    neighbour = candidate(3, lexical=6.0, from_context=True)
    ranked = {hit.memory.id: hit for hit in rank([lone, framed, neighbour], {"m2": ("m3", None)}, QUERY)}
    assert ranked["m2"].score.similarity > ranked["m1"].score.similarity
    flat = {
        hit.memory.id: hit
        for hit in rank([lone, framed, neighbour], {"m2": ("m3", None)}, replace(QUERY, context_weight=0.0))
    }
    assert flat["m2"].score.similarity == pytest.approx(flat["m1"].score.similarity)


def test_the_time_the_query_speaks_of_counts_as_a_match_of_structure() -> None:
    inside = candidate(2, lexical=2.0)
    window_query = replace(QUERY, spoken_window=TimeWindow(NOW - timedelta(days=3), NOW))
    (hit,) = rank([inside], {}, window_query)
    assert hit.score.entity_match == 1.0
    (outside,) = rank([candidate(9, lexical=2.0)], {}, window_query)
    assert outside.score.entity_match == 0.0


def test_exact_evidence_of_a_rare_code_outranks_every_look_alike() -> None:
    """The lexical channel found the memory holding the query's order number; twenty near-identical
    neighbours have higher cosines and are newer. Exact evidence ranks first, and explain shows it."""
    held = replace(
        candidate(30, lexical=3.0, dense=0.70, min_similarity=0.4),
        memory=memory(
            id="m30", content="用户的订单NJDJKA5U37下周寄往苏州。", created_at=NOW - timedelta(days=30)
        ),
    )
    neighbours = [
        replace(
            candidate(
                n, channels=(Channel.VECTOR, Channel.LEXICAL), lexical=2.5, dense=0.93, min_similarity=0.4
            ),
            memory=memory(
                id=f"m{n}", content=f"用户的订单AB{n:02d}CD{n:02d}EF下周寄往南京。", created_at=NOW
            ),
        )
        for n in range(20)
    ]
    ranked = rank([*neighbours, held], {}, replace(QUERY, rare_terms=("njdjka5u37",)))
    assert ranked[0].memory.id == "m30"
    assert ranked[0].score.exact_evidence == 1.0 and ranked[1].score.exact_evidence == 0.0
    assert ranked[0].score.final > ranked[1].score.final
    # without the statistics' rare term, the look-alikes win, as before
    assert rank([*neighbours, held], {}, QUERY)[0].memory.id != "m30"


@pytest.mark.parametrize(
    ("content", "held"),
    [
        ("Order 3F9A0C21DE ships", 1.0),
        ("用户的订单3F9A0C21DE下周寄往杭州", 1.0),  # a code inside Chinese text
        ("Order 3F9A0C21DEX ships", 0.0),  # a longer code is another code
        ("Order X3F9A0C21DE ships", 0.0),
    ],
)
def test_a_code_is_held_as_a_whole_word(content: str, held: float) -> None:
    found = replace(candidate(1, lexical=1.0), memory=memory(id="m1", content=content))
    assert exact_evidence(found, ("3f9a0c21de",)) == held


def test_the_cross_encoder_blends_into_the_similarity() -> None:
    (hit,) = rank([candidate(1, lexical=2.0, channels=(Channel.LEXICAL,))], {}, QUERY)
    confident = rescored(hit, 8.0, 0.5, QUERY.weights)
    doubtful = rescored(hit, -8.0, 0.5, QUERY.weights)
    assert confident.score.rerank == pytest.approx(1 / (1 + math.exp(-8.0)))
    assert doubtful.score.similarity < confident.score.similarity <= hit.score.similarity
    assert doubtful.score.final < confident.score.final
    assert confident.memory.tier is Tier.SEMANTIC and confident.score.recency == hit.score.recency


def test_the_cross_encoder_reorders_the_head_and_never_drops_it_below_the_tail() -> None:
    hits = rank([candidate(i, lexical=10.0 - i, channels=(Channel.LEXICAL,)) for i in range(4)], {}, QUERY)
    head = hits[:3]
    # A candidate it does not judge, scoring above what the head's worst will score once judged.
    tail = [replace(hits[3], score=replace(hits[3].score, final=0.5))]
    # The cross-encoder finds the head's last the best and its first the worst ...
    order = reranked(head, [-9.0, 1.0, 9.0], tail, 0.7, QUERY.weights)
    assert [hit.memory.id for hit in order] == ["m2", "m1", "m0", "m3"]
    # ... the worst still ahead of the candidate it did not judge, which is untouched.
    assert order[2].score.final < order[3].score.final and order[3] == tail[0]
    assert [hit.score.rerank > 0 for hit in order] == [True, True, True, False]


def test_the_cross_encoder_does_not_undo_exact_evidence() -> None:
    base = rank([candidate(1, lexical=1.0), candidate(2, lexical=2.0)], {}, QUERY)
    evidence = [replace(base[1], score=replace(base[1].score, exact_evidence=1.0)), base[0]]
    # the cross-encoder much prefers the look-alike: the memory holding the code still comes first
    again = reranked(evidence, [-8.0, 8.0], [], 0.7, QUERY.weights)
    assert [hit.score.exact_evidence for hit in again] == [1.0, 0.0]
