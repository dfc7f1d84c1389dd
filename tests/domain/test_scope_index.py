"""A subject's index (domain/scope_index.py), table-driven: which memories a scope sees, the exact
nearest by cosine, BM25 as the lexical statement scores it, a session's neighbours, and slots replaced
rather than rewritten. tests/store/test_scope_index.py compares it with the real statements."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from hindsight_server.domain.bm25 import Bm25, Bm25Plan, TermStatistics
from hindsight_server.domain.model import Kind, Scope, Status, Tier, TimeWindow, VectorSpace, Visibility
from hindsight_server.domain.scope_index import (
    MAX_KEPT_TERMS,
    IndexedMemory,
    ScopeIndex,
    nearest_slots,
)
from tests.domain.builders import nearest, numbered

NOW = datetime(2024, 3, 15, 12, tzinfo=UTC)
EN, ML = VectorSpace.ENGLISH, VectorSpace.MULTILINGUAL
BM25 = Bm25(k1=1.2, b=0.75, common_term_share=0.5, match_terms=8, match_rows=3)


def _index(*rows: IndexedMemory) -> ScopeIndex:
    index = ScopeIndex("acme", "user-7", {EN: 2, ML: 3})
    index.upsert(rows)
    return index


def _row(
    n: int, vectors: dict[VectorSpace, list[float]] | None = None, words: str = "", **fields: Any
) -> IndexedMemory:
    lexemes = sorted(set(words.split()))
    counts = [words.split().count(w) for w in lexemes]
    arrays = {space: np.array(v, dtype=np.float32) for space, v in (vectors or {}).items()}
    created = fields.pop("created_at", NOW - timedelta(hours=n))
    return IndexedMemory(
        numbered(n, created_at=created, **fields), arrays, lexemes, counts, len(words.split())
    )


def _scope(**fields: Any) -> Scope:
    values: dict[str, Any] = {"tenant_id": "acme", "now": NOW, "subject": "user-7"} | fields
    return Scope(**values)


@pytest.mark.parametrize(
    ("memory", "scope", "seen"),
    [
        ({}, {}, True),
        ({"status": Status.SUPERSEDED}, {}, False),
        ({"status": Status.SUPERSEDED}, {"include_superseded": True}, True),
        ({"status": Status.DELETED}, {"include_superseded": True}, False),
        ({"status": Status.PENDING}, {}, False),
        ({"expires_at": NOW}, {}, False),  # expired at the moment asked
        ({"expires_at": NOW + timedelta(seconds=1)}, {}, True),
        ({"visibility": Visibility.PRIVATE, "agent_id": "a1"}, {}, False),
        ({"visibility": Visibility.PRIVATE, "agent_id": "a1"}, {"agent_id": "a1"}, True),
        ({"visibility": Visibility.PRIVATE, "agent_id": "a1"}, {"agent_id": "a2"}, False),
        ({"agent_id": "a1"}, {"agent_id": "a2"}, True),  # shared: every agent
        ({"tier": Tier.WORKING}, {"tiers": (Tier.SEMANTIC, Tier.EPISODIC)}, False),
        ({"tier": Tier.WORKING}, {"tiers": (Tier.WORKING,)}, True),
        ({"kind": Kind.FACT}, {"kinds": (Kind.PREFERENCE,)}, False),
        ({"created_at": NOW - timedelta(days=3)}, {"window": TimeWindow(NOW - timedelta(days=4), NOW)}, True),
        (
            {"created_at": NOW - timedelta(days=5)},
            {"window": TimeWindow(NOW - timedelta(days=4), NOW)},
            False,
        ),
        # The time it speaks of: valid_from first, then created_at; the end is exclusive.
        (
            {"created_at": NOW, "valid_from": NOW - timedelta(days=5)},
            {"window": TimeWindow(NOW - timedelta(days=6), NOW - timedelta(days=4))},
            True,
        ),
        (
            {"created_at": NOW - timedelta(days=4)},
            {"window": TimeWindow(None, NOW - timedelta(days=4))},
            False,
        ),
    ],
)
def test_a_scope_sees_what_the_statements_filter(
    memory: dict[str, Any], scope: dict[str, Any], seen: bool
) -> None:
    index = _index(_row(1, **memory))
    assert bool(index.visible(_scope(**scope))[0]) is seen


@pytest.mark.parametrize(
    "scope", [{"subject": "user-8"}, {"tenant_id": "other"}, {"as_of": NOW - timedelta(days=1)}]
)
def test_the_index_refuses_a_scope_it_does_not_hold(scope: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="present-time recalls of its own tenant and subject"):
        _index(_row(1)).visible(_scope(**scope))


def test_an_index_of_the_whole_tenant_sees_a_subject_or_every_subject() -> None:
    index = ScopeIndex("acme", "", {EN: 2, ML: 3})
    index.upsert([_row(1, subject="user-7"), _row(2, subject="user-8"), _row(3, subject="")])
    seen = {
        subject: [
            m for m, shown in zip(index.ids(), index.visible(_scope(subject=subject)), strict=True) if shown
        ]
        for subject in ("user-7", "user-8", "", "nobody")
    }
    assert seen == {
        "user-7": [numbered(1).id],
        "user-8": [numbered(2).id],
        "": [numbered(1).id, numbered(2).id, numbered(3).id],  # no subject named: all of them
        "nobody": [],
    }
    with pytest.raises(ValueError, match="own tenant"):
        index.visible(_scope(tenant_id="other"))


def test_the_nearest_are_ranked_by_cosine_whatever_the_vectors_length() -> None:
    index = _index(
        _row(1, {EN: [10.0, 0.0], ML: [1, 0, 0]}),  # long, same direction as the query
        _row(2, {EN: [0.6, 0.8], ML: [0, 1, 0]}),
        _row(3, {EN: [0.0, 1.0]}, status=Status.DELETED),  # not visible
        _row(4, {ML: [1, 1, 0]}),  # no English vector
        _row(5, {EN: [-1.0, 0.0], ML: [0, 0, 1]}),
    )
    visible = index.visible(_scope())
    found = nearest(index, visible, EN, np.array([2.0, 0.0], dtype=np.float32), 3)
    assert [(s.memory.id[-1], round(s.score, 6)) for s in found] == [("1", 1.0), ("2", 0.6), ("5", -1.0)]
    only_without = nearest(index, visible, ML, np.array([1, 0, 0], dtype=np.float32), 5, without=EN)
    assert [(s.memory.id[-1], round(s.score, 6)) for s in only_without] == [("4", round(1 / math.sqrt(2), 6))]
    assert nearest(index, visible, EN, np.zeros(2, dtype=np.float32), 3) == []


def _bm25(tf: float, idf: float, length: float, average: float) -> float:
    return idf * tf * (BM25.k1 + 1) / (tf + BM25.k1 * (1 - BM25.b + BM25.b * length / average))


def test_bm25_scores_the_newest_match_rows_holders_of_a_match_term_on_every_usable_term() -> None:
    index = _index(
        _row(1, words="kitten grey grey", created_at=NOW - timedelta(hours=1)),
        _row(2, words="kitten", created_at=NOW - timedelta(hours=2)),
        _row(3, words="grey cat", created_at=NOW - timedelta(hours=3)),  # no match term: never a candidate
        _row(4, words="kitten kitten", created_at=NOW - timedelta(hours=4)),
        _row(5, words="kitten grey", created_at=NOW - timedelta(hours=5)),  # beyond match_rows (3)
    )
    plan = Bm25Plan(idf={"kitten": 2.0, "grey": 1.0}, match=("kitten",))
    found = index.lexical(index.visible(_scope()), plan, BM25, 2.0, 10)
    expected = {
        "1": _bm25(1, 2.0, 3, 2.0) + _bm25(2, 1.0, 3, 2.0),
        "2": _bm25(1, 2.0, 1, 2.0),
        "4": _bm25(2, 2.0, 2, 2.0),
    }
    assert [s.memory.id[-1] for s in found] == sorted(expected, key=lambda k: -expected[k])
    assert {s.memory.id[-1]: s.score for s in found} == pytest.approx(expected)


def test_bm25_breaks_a_tie_by_the_newest() -> None:
    index = _index(
        _row(1, words="kitten", created_at=NOW - timedelta(hours=2)),
        _row(2, words="kitten", created_at=NOW - timedelta(hours=1)),
    )
    plan = Bm25Plan(idf={"kitten": 1.0}, match=("kitten",))
    assert [s.memory.id[-1] for s in index.lexical(index.visible(_scope()), plan, BM25, 1.0, 5)] == ["2", "1"]


def test_a_sessions_neighbours_by_time_then_id_kept_when_visible() -> None:
    at = NOW - timedelta(hours=1)
    index = _index(
        _row(1, session_id="s1", created_at=at - timedelta(minutes=2)),
        _row(2, session_id="s1", created_at=at),
        _row(3, session_id="s1", created_at=at),  # the same microsecond as 2: the id orders them
        _row(4, session_id="s1", created_at=at + timedelta(minutes=1), status=Status.DELETED),
        _row(5, session_id="s2", created_at=at + timedelta(minutes=2)),
        _row(6, session_id="", created_at=at),
    )
    ids = {n: numbered(n).id for n in range(1, 7)}
    memories, around = index.adjacent(index.visible(_scope()), [ids[2], ids[3], ids[5], ids[6]])
    # 3 is after 2; after 3 comes 4, deleted (not visible): no next. 5 is alone in s2; 6 has no session.
    assert around == {ids[2]: (ids[1], ids[3]), ids[3]: (ids[2], None)}
    assert sorted(m.id for m in memories) == [ids[1], ids[2], ids[3]]


def test_a_changed_memory_takes_a_new_slot_and_the_old_one_dies() -> None:
    index = _index(_row(1, {EN: [1.0, 0.0]}, words="kitten"), _row(2, words="puppy"))
    index.upsert([_row(1, {EN: [0.0, 1.0]}, words="tiger")])
    assert (index.live, index.dead) == (2, 1)
    visible = index.visible(_scope())
    kitten = Bm25Plan(idf={"kitten": 1.0}, match=("kitten",))
    assert index.lexical(visible, kitten, BM25, 1.0, 5) == []  # the old words are gone
    tiger = Bm25Plan(idf={"tiger": 1.0}, match=("tiger",))
    assert [s.memory.id for s in index.lexical(visible, tiger, BM25, 1.0, 5)] == [numbered(1).id]
    np.testing.assert_array_equal(index.first_vectors([numbered(1).id], [EN])[EN][numbered(1).id], [0.0, 1.0])
    assert [s.score for s in nearest(index, visible, EN, np.array([1.0, 0.0], dtype=np.float32), 5)] == [0.0]
    index.remove([numbered(2).id, "not-held"])
    assert (
        (index.live, index.dead) == (1, 2) and numbered(2).id not in index and index.ids() == [numbered(1).id]
    )


def test_a_page_is_held_as_its_memories_one_by_one() -> None:
    """A page is added a column at a time: each memory's fields, vectors (or none in a space), words
    and session land in its own slot, across the arrays' growth; a memory given twice is held once, as
    given last."""
    page = [
        _row(
            n,
            {EN: [float(n), 1.0]} if n % 2 else {ML: [1.0, 0.0, float(n)]},
            words=f"w{n} common",
            session_id="s" if n % 3 == 0 else "",
            tier=Tier.SEMANTIC if n % 5 == 0 else Tier.EPISODIC,
        )
        for n in range(1, 151)
    ]
    one_by_one = ScopeIndex("acme", "user-7", {EN: 2, ML: 3})
    for row in page:
        one_by_one.upsert([row])
    at_once = ScopeIndex("acme", "user-7", {EN: 2, ML: 3})
    at_once.upsert([*page[:-1], _row(7, {EN: [0.0, 1.0]}, words="stale"), page[-1], page[6]])
    assert (at_once.live, at_once.dead, at_once.ids()) == (
        150,
        0,
        [row.memory.id for row in page if row is not page[6]] + [page[6].memory.id],
    )
    for scope in (_scope(), _scope(tiers=(Tier.SEMANTIC,))):
        visible, expected = at_once.visible(scope), one_by_one.visible(scope)
        for space, query in ((EN, [1.0, 0.5]), (ML, [0.5, 0.1, 1.0])):
            vector = np.array(query, dtype=np.float32)
            assert [(s.memory.id, s.score) for s in nearest(at_once, visible, space, vector, 200)] == [
                (s.memory.id, s.score) for s in nearest(one_by_one, expected, space, vector, 200)
            ]
        plan = Bm25Plan(idf={"w7": 2.0, "common": 0.1}, match=("w7", "common"))
        assert at_once.lexical(visible, plan, BM25, 2.0, 5) == one_by_one.lexical(
            expected, plan, BM25, 2.0, 5
        )
        ids = [row.memory.id for row in page[:12]]
        assert at_once.adjacent(visible, ids) == one_by_one.adjacent(expected, ids)


def test_an_index_made_for_a_load_holds_it_without_growing() -> None:
    """Made for the memories it is about to be given, its arrays hold them and then some: a load and the
    writes after it add rows in place (views taken before stay views of the index's arrays), where an
    index made small grows, into new arrays, as they come."""
    rows = [_row(n, {EN: [1.0, float(n)]}) for n in range(1, 401)]
    for expected, grows in ((400, False), (0, True)):
        index = ScopeIndex("acme", "user-7", {EN: 2}, expected=expected)
        index.upsert(rows[:1])
        before, _ = index.matrix(EN)
        index.upsert(rows[1:])
        index.upsert([_row(n, {EN: [0.0, 1.0]}) for n in range(401, 451)])  # a quarter more
        after, _ = index.matrix(EN)
        assert np.shares_memory(before, after) is not grows
        assert index.live == 450 and after[0].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("memories", [1, 255, 256, 700])  # under, at and across the product's row blocks
@pytest.mark.parametrize("queries", [1, 2, 5])
def test_a_batch_of_searches_finds_what_each_search_finds_alone(memories: int, queries: int) -> None:
    rng = np.random.default_rng(memories * 10 + queries)
    index = ScopeIndex("acme", "user-7", {EN: 8, ML: 3})
    index.upsert(
        _row(n, {EN: rng.normal(size=8).tolist()}, status=Status.DELETED if n % 7 == 0 else Status.ACTIVE)
        for n in range(1, memories + 1)
    )
    visible = index.visible(_scope())
    limits = [1, 5, 40, 1_000][:queries] + [3] * max(0, queries - 4)
    asks = [index.nearest_ask(visible, EN, rng.normal(size=8).astype(np.float32), k) for k in limits]
    assert all(ask is not None for ask in asks)
    together = nearest_slots(*index.matrix(EN), [ask for ask in asks if ask is not None])
    for ask, (slots, cosines) in zip(asks, together, strict=True):
        assert ask is not None
        alone = nearest(index, visible, EN, ask.query, ask.limit)
        assert [s.memory.id for s in index.found(slots, cosines)] == [s.memory.id for s in alone]
        np.testing.assert_allclose(cosines, [s.score for s in alone], atol=1e-6)
        assert len(alone) == min(ask.limit, sum(1 for n in range(1, memories + 1) if n % 7))


def test_a_recalls_searches_survive_the_index_changing_under_them() -> None:
    """A recall takes what it may see once; concurrent recalls' looks may then add memories (past its
    mask's end: not seen) and replace or remove others (their old slots: left out), between its
    searches or while a vector search runs on another thread."""
    at = NOW - timedelta(hours=1)
    index = _index(
        _row(1, {EN: [1.0, 0.0]}, words="kitten", session_id="s", created_at=at),
        _row(2, {EN: [0.9, 0.1]}, words="kitten", session_id="s", created_at=at + timedelta(minutes=1)),
        _row(3, {EN: [0.8, 0.2]}, words="kitten", session_id="s", created_at=at + timedelta(minutes=2)),
    )
    visible = index.visible(_scope())
    ask = index.nearest_ask(visible, EN, np.array([1.0, 0.0], dtype=np.float32), 5)
    assert ask is not None
    ((slots, cosines),) = nearest_slots(*index.matrix(EN), [ask])
    index.upsert(
        [_row(2, {EN: [0.0, 1.0]}, words="tiger", session_id="s", created_at=at + timedelta(minutes=1))]
    )
    index.upsert(
        [_row(4, {EN: [1.0, 0.0]}, words="kitten", session_id="s", created_at=at + timedelta(minutes=3))]
    )
    index.remove([numbered(3).id])
    ids = {n: numbered(n).id for n in range(1, 5)}
    assert [s.memory.id for s in index.found(slots, cosines)] == [ids[1]]  # 2 and 3 died meanwhile
    assert [s.memory.id for s in nearest(index, visible, EN, ask.query, 5)] == [ids[1]]
    kitten = Bm25Plan(idf={"kitten": 1.0}, match=("kitten",))
    assert [s.memory.id for s in index.lexical(visible, kitten, BM25, 1.0, 5)] == [ids[1]]
    memories, around = index.adjacent(visible, [ids[1]])
    assert (memories, around) == ([], {})  # its neighbour 2 changed after the recall began: not seen
    assert [s.memory.id for s in index.lexical(index.visible(_scope()), kitten, BM25, 1.0, 5)] == [
        ids[4],
        ids[1],
    ]


def test_its_size_grows_with_what_it_holds() -> None:
    small = _index(_row(1, {EN: [1.0, 0.0]}, words="kitten"))
    large = _index(
        *(_row(n, {EN: [1.0, 0.0]}, words="kitten grey", content="x" * 500) for n in range(1, 200))
    )
    assert 0 < small.nbytes < large.nbytes
    assert large.nbytes > 199 * 500  # at least the text


def test_first_vectors_gives_each_memory_its_vector_in_the_first_space_it_has_one_in() -> None:
    index = _index(
        _row(1, {EN: [1.0, 0.0], ML: [0.0, 0.0, 1.0]}),  # both: English first
        _row(2, {ML: [0.0, 1.0, 0.0]}),  # no English vector: the multilingual one
        _row(3),  # none yet (not embedded)
    )
    ids = [numbered(n).id for n in (1, 2, 3)] + ["not-held"]
    found = index.first_vectors(ids, [EN, ML])
    assert {space: sorted(by_id) for space, by_id in found.items()} == {EN: [ids[0]], ML: [ids[1]]}
    np.testing.assert_array_equal(found[EN][ids[0]], [1.0, 0.0])
    np.testing.assert_array_equal(found[ML][ids[1]], [0.0, 1.0, 0.0])
    multilingual_only = index.first_vectors(ids, [ML])
    assert sorted(multilingual_only[ML]) == sorted(ids[:2])
    assert index.first_vectors([], [EN, ML]) == {EN: {}, ML: {}}


def test_first_vectors_reads_a_companion_spaces_vector_whatever_else_a_memory_has() -> None:
    zh = VectorSpace.CHINESE
    index = ScopeIndex("acme", "user-7", {EN: 2, ML: 3, zh: 2})
    index.upsert(
        [
            _row(1, {ML: [0.0, 0.0, 1.0], zh: [1.0, 0.0]}),  # Chinese: both multilingual models'
            _row(2, {ML: [0.0, 1.0, 0.0]}),  # the second one not embedded yet
            _row(3, {EN: [0.0, 1.0], ML: [1.0, 0.0, 0.0]}),  # English
        ]
    )
    ids = [numbered(n).id for n in (1, 2, 3)]
    found = index.first_vectors(ids, [ML, zh])
    assert {space: sorted(by_id) for space, by_id in found.items()} == {ML: sorted(ids), zh: [ids[0]]}
    np.testing.assert_array_equal(found[zh][ids[0]], [1.0, 0.0])
    # the judging spaces still stand in for each other, the companion beside them
    english_first = index.first_vectors(ids, [EN, ML, zh])
    assert sorted(english_first[EN]) == [ids[2]] and sorted(english_first[ML]) == sorted(ids[:2])
    assert sorted(english_first[zh]) == [ids[0]]


def _whole_tenant() -> ScopeIndex:
    index = ScopeIndex("acme", "", {EN: 2})
    index.upsert([_row(1, words="kitten")])
    return index


def test_kept_statistics_answer_until_a_change_and_only_for_the_terms_read() -> None:
    index = _whole_tenant()
    read = TermStatistics(10, 40, {"kitten": 3})  # "zebra": in no memory
    index.keep_statistics(index.generation, ["kitten", "zebra"], read)
    assert index.statistics(["zebra", "kitten"]) == read
    assert index.statistics(["zebra"]) == TermStatistics(10, 40, {})
    assert index.statistics(["kitten", "puppy"]) is None  # one term never read
    index.upsert([_row(2, words="puppy")])
    assert index.statistics(["kitten"]) is None


@pytest.mark.parametrize(
    ("subject", "changed_since_read", "kept"),
    [("", False, True), ("", True, False), ("user-7", False, False)],
    ids=["whole tenant", "changed while reading", "one subject"],
)
def test_statistics_are_kept_only_as_fresh_as_the_index(
    subject: str, changed_since_read: bool, kept: bool
) -> None:
    index = ScopeIndex("acme", subject, {EN: 2})
    index.upsert([_row(1, words="kitten")])
    began = index.generation
    if changed_since_read:
        index.remove([numbered(1).id])
    index.keep_statistics(began, ["kitten"], TermStatistics(1, 1, {"kitten": 1}))
    assert (index.statistics(["kitten"]) is not None) is kept


def test_kept_statistics_start_again_on_new_totals_and_past_the_bound() -> None:
    index = _whole_tenant()
    index.keep_statistics(index.generation, ["kitten"], TermStatistics(10, 40, {"kitten": 3}))
    index.keep_statistics(index.generation, ["puppy"], TermStatistics(11, 44, {"puppy": 1}))
    assert index.statistics(["kitten"]) is None  # read before a write the second read saw
    assert index.statistics(["puppy"]) == TermStatistics(11, 44, {"puppy": 1})
    many = [f"term{i}" for i in range(MAX_KEPT_TERMS)]
    index.keep_statistics(index.generation, many, TermStatistics(11, 44, {}))
    assert index.statistics(["puppy"]) is None and index.statistics(many) == TermStatistics(11, 44, {})


def test_what_a_kind_of_scope_sees_is_kept_until_a_change_and_the_expiry_applied_each_time() -> None:
    index = _index(_row(1), _row(2, expires_at=NOW + timedelta(seconds=1)))
    assert index.visible(_scope()).tolist() == [True, True]
    later = index.visible(_scope(now=NOW + timedelta(seconds=2)))  # the same kind of scope, later
    assert later.tolist() == [True, False]
    index.remove([numbered(1).id])
    assert index.visible(_scope()).tolist() == [False, True]
    assert index.visible(_scope(agent_id="a2")).tolist() == [False, True]
    kept = _index(_row(1)).visible(_scope())
    assert not kept.flags.writeable  # kept for the next recall: no caller may change it


def test_a_space_takes_memory_only_once_a_memory_has_a_vector_there() -> None:
    """A scope of English memories holds no matrix for another language's model; the first vector there
    brings one, with the earlier slots empty (never found in that space)."""
    index = ScopeIndex("acme", "user-7", {EN: 2, ML: 3, VectorSpace.CHINESE: 512})
    index.upsert(_row(n, {EN: [1.0, 0.0], ML: [0.0, 0.0, 1.0]}) for n in range(1, 101))
    english_only = index.nbytes
    assert english_only < 100 * 512 * 4  # no 512 floats a slot for the Chinese model
    everyone = index.visible(_scope())
    assert index.nearest_ask(everyone, VectorSpace.CHINESE, np.ones(512, np.float32), 5) is None
    chinese = np.zeros(512, np.float32)
    chinese[0] = 1.0
    index.upsert([_row(101, {ML: [0.0, 1.0, 0.0], VectorSpace.CHINESE: chinese.tolist()})])
    assert index.nbytes > english_only + 100 * 512 * 4
    everyone = index.visible(_scope())
    ask = index.nearest_ask(everyone, VectorSpace.CHINESE, chinese, 5)
    assert ask is not None
    assert [hit.memory.id for hit in index.searched(VectorSpace.CHINESE, ask)] == [numbered(101).id]
