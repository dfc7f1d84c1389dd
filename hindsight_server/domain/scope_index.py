"""One subject's memories, or a whole tenant's, held in a server's own memory, searched as the recall
statements search them.

A recall of a user reads three channels' rows from PostgreSQL (the vector search, BM25 over the matching
rows, the turns around the strongest candidates): ~5 ms of the database's CPU and ~2 ms of the server's
turning rows into memories, for every recall. A scope recalled often (a tenant small enough to hold
whole, else a subject of it) is held here instead, with its vectors in a matrix, its lexemes in postings
and every memory already built: a recall then asks the database only what changed since it last looked
(pipelines/hot_scopes.py).

The searches give what the statements in store/channels.py give, row for row: the same filters
(`ScopeIndex.visible` follows `where_in_scope`), the same BM25 (`lexical`: the candidates are the newest
`match_rows` memories holding a match term, scored on every usable term), the same neighbours
(`adjacent`: the previous and next memory of a session, then kept only when visible). Two differences,
both in the index's favour: the vector search is exact where the statement walks an HNSW graph
(approximate), and an index of one subject looks for a neighbour among the subject's own memories, where
the statement also sees another subject's turn of the same session (and then drops it as out of scope;
an index of the whole tenant does the same).

Slots are append-only: a changed memory takes a new slot and its old one is marked dead, so postings and
matrices never need rewriting (pipelines/hot_scopes.py reads a subject in again once its dead slots
outnumber its live ones). Pure: numpy, no I/O.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from hindsight_server.domain.bm25 import Bm25, Bm25Plan, TermStatistics, term_scores
from hindsight_server.domain.model import Kind, Memory, Scope, Status, Tier, VectorSpace, Visibility
from hindsight_server.domain.vectors import COMPANION_SPACES, FloatVector, Vectors

__all__ = [
    "MAX_KEPT_TERMS",
    "IndexedMemory",
    "NearestAsk",
    "ScopeChanges",
    "ScopeIndex",
    "Scored",
    "nearest_slots",
]

_STATUSES = {status: code for code, status in enumerate(Status)}
_TIERS = {tier: code for code, tier in enumerate(Tier)}
_KINDS = {kind: code for code, kind in enumerate(Kind)}
_NEVER = np.iinfo(np.int64).max  # an expiry that never comes
_FIRST_CAPACITY = 64
MAX_KEPT_TERMS = 4096  # the terms whose document frequency an index keeps, at most
_MAX_MASKS = 64  # kinds of scope whose visible slots an index keeps
# Bytes a memory's Python objects take beside its text (the Memory, its strings, dicts and postings),
# measured with tracemalloc on LoCoMo turns; an estimate for the memory budget, not an exact count.
_OBJECT_BYTES = 900


@dataclass(frozen=True, slots=True)
class IndexedMemory:
    """A memory with what the searches read of it: its vectors, and its lexemes with their counts (the
    number of positions PostgreSQL keeps for each, which is what BM25 counts) and its length in terms."""

    memory: Memory
    vectors: Mapping[VectorSpace, FloatVector]
    lexemes: Sequence[str] = ()
    counts: Sequence[int] = ()
    terms: int = 0


@dataclass(frozen=True, slots=True)
class ScopeChanges:
    """What changed in a subject since a horizon (store/scope_index.py, migration 0022)."""

    horizon: int  # the next look reads the changes of transactions from here on
    removed: bool  # a memory left the tenant's subjects at or after the last horizon: build again
    changed: list[str]  # the ids of the subject's memories changed at or after the last horizon


@dataclass(frozen=True, slots=True)
class Scored:
    memory: Memory
    score: float


@dataclass(frozen=True, slots=True, eq=False)
class NearestAsk:
    """One vector search, as `nearest_slots` runs it: the slots it may return, its query, how many."""

    candidates: npt.NDArray[np.intp]
    query: npt.NDArray[np.float32]
    query_norm: float
    limit: int


def _micros(moment: datetime) -> int:
    """A moment as integer microseconds since the epoch: PostgreSQL's precision, compared exactly."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(slots=True)
class _Column:
    """A growable numpy array of one field, a value per slot."""

    values: npt.NDArray[Any]

    @classmethod
    def of(cls, dtype: type, capacity: int, width: int = 0) -> _Column:
        shape = (capacity, width) if width else (capacity,)
        return cls(np.zeros(shape, dtype=dtype))

    def fill(self, first: int, values: Sequence[object] | npt.NDArray[Any]) -> None:
        """Sets a value per slot from `first` on, growing the array when they reach past its end."""
        self._reserve(first + len(values))
        self.values[first : first + len(values)] = values

    def fill_all(self, first: int, count: int, value: object) -> None:
        """Sets `count` slots from `first` on to one value."""
        self._reserve(first + count)
        self.values[first : first + count] = value

    def _reserve(self, slots: int) -> None:
        # A grown array is a new one: views of the old (ScopeIndex.matrix, read on another thread) stay
        # as they were.
        if slots > len(self.values):
            capacity = max(slots, len(self.values) * 2)
            grown = np.zeros((capacity, *self.values.shape[1:]), dtype=self.values.dtype)
            grown[: len(self.values)] = self.values
            self.values = grown


@dataclass(slots=True)
class _Postings:
    slots: array[int] = field(default_factory=lambda: array("i"))
    counts: array[int] = field(default_factory=lambda: array("i"))


class ScopeIndex:
    """A subject's memories, or with the subject "" every memory of the tenant (every status, so a
    neighbour that is no longer visible is still known)."""

    def __init__(
        self, tenant_id: str, subject: str, dimensions: Mapping[VectorSpace, int], *, expected: int = 0
    ) -> None:
        """`expected`: how many memories it is about to be given (a scope being read in); its arrays
        are made that large and a quarter more at once, so a load never stops the event loop to copy
        them into larger ones (~25 ms for 10k memories' vectors), nor does the next write."""
        capacity = max(_FIRST_CAPACITY, expected + expected // 4)
        self.tenant_id = tenant_id
        self.subject = subject
        self._subjects: dict[str, int] = {}  # a whole tenant's: each subject's code in _subject
        # By slot (None: dead). Only the memory: its vectors live in the matrices, its terms in the postings.
        self._memories: list[Memory | None] = []
        self._slot_of: dict[str, int] = {}
        self._agents: dict[str, int] = {}
        self._sessions: dict[str, int] = {"": 0}
        self._text_bytes = 0
        self._list_bytes = 0  # the postings' and the sessions' entries, counted as they are added
        self._alive = _Column.of(np.bool_, capacity)
        self._status = _Column.of(np.int8, capacity)
        self._tier = _Column.of(np.int8, capacity)
        self._kind = _Column.of(np.int8, capacity)
        self._shared = _Column.of(np.bool_, capacity)
        self._agent = _Column.of(np.int32, capacity)
        self._session = _Column.of(np.int32, capacity)
        self._subject = _Column.of(np.int32, capacity)
        self._created = _Column.of(np.int64, capacity)
        # coalesce(valid_from, created_at): the time it speaks of
        self._spoken = _Column.of(np.int64, capacity)
        self._expires = _Column.of(np.int64, capacity)
        self._terms = _Column.of(np.float64, capacity)
        self._dimensions = dict(dimensions)
        self._has = {space: _Column.of(np.bool_, capacity) for space in dimensions}
        # A space's vectors once a memory has one there: a scope of one language never holds a matrix of
        # zeros for the other's model (384-512 floats a slot).
        self._matrix: dict[VectorSpace, _Column] = {}
        self._norm: dict[VectorSpace, _Column] = {}
        self._postings: dict[str, _Postings] = {}
        self._in_session: dict[int, array[int]] = {}  # a session's slots, oldest slot first
        self._ordered: dict[int, tuple[list[tuple[int, str]], list[int]]] = {}  # see _session_order
        # The tenant's lexical statistics as recalls read them from the database since the last change
        # (an index of the whole tenant only: a change of another subject is not seen here). The writes
        # that change them change a memory of the tenant too, which the next look applies here.
        self.generation = 0  # counts the changes, so a read begun before one is not kept after it
        self._totals: tuple[int, int] | None = None  # (documents, terms)
        self._df: dict[str, int] = {}  # a term's document frequency; 0: no memory holds it
        # What each kind of scope sees but for the expiry, until the next change (`visible`); the expiry
        # is applied on top once a memory that expires is held.
        self._masks: dict[tuple[object, ...], npt.NDArray[np.bool_]] = {}
        self._expiring = False

    # -- changes ------------------------------------------------------------------------------------

    def upsert(self, rows: Iterable[IndexedMemory]) -> None:
        """Adds memories, or replaces the ones held under the same id (their old slots die)."""
        page = list(rows)
        # A memory given twice is held once, as given last (its first copy would take a slot that dies).
        last = {row.memory.id: position for position, row in enumerate(page)}
        if len(last) < len(page):
            page = [row for position, row in enumerate(page) if last[row.memory.id] == position]
        self.remove(last)
        self._append(page)

    def remove(self, memory_ids: Iterable[str]) -> None:
        self._changed()
        for memory_id in memory_ids:
            slot = self._slot_of.pop(memory_id, None)
            if slot is not None:
                held = self._memories[slot]
                self._text_bytes -= 0 if held is None else len(held.content.encode())
                self._memories[slot] = None
                self._alive.values[slot] = False
                self._ordered.pop(int(self._session.values[slot]), None)

    def _changed(self) -> None:
        self.generation += 1
        self._totals = None
        self._df.clear()
        self._masks.clear()

    def _append(self, rows: Sequence[IndexedMemory]) -> None:
        """New slots for `rows`, a column at a time: a page of a scope read in costs a few numpy
        assignments per column, not one per memory and column."""
        first = len(self._memories)
        memories = [row.memory for row in rows]
        self._alive.fill_all(first, len(rows), True)
        self._status.fill(first, [_STATUSES[m.status] for m in memories])
        self._tier.fill(first, [_TIERS[m.tier] for m in memories])
        self._kind.fill(first, [_KINDS[m.kind] for m in memories])
        self._shared.fill(first, [m.visibility is Visibility.SHARED for m in memories])
        self._agent.fill(first, [self._agents.setdefault(m.agent_id, len(self._agents)) for m in memories])
        self._subject.fill(
            first, [self._subjects.setdefault(m.subject, len(self._subjects)) for m in memories]
        )
        created = [_micros(m.created_at) for m in memories]
        self._created.fill(first, created)
        self._spoken.fill(
            first,
            [
                c if m.valid_from is None else _micros(m.valid_from)
                for c, m in zip(created, memories, strict=True)
            ],
        )
        self._expires.fill(
            first, [_NEVER if m.expires_at is None else _micros(m.expires_at) for m in memories]
        )
        self._expiring |= any(m.expires_at is not None for m in memories)
        self._terms.fill(first, [float(row.terms) for row in rows])
        for space, dimension in self._dimensions.items():
            held = [
                (offset, vector)
                for offset, row in enumerate(rows)
                if (vector := row.vectors.get(space)) is not None
            ]
            offsets = [offset for offset, _ in held]
            has = np.zeros(len(rows), dtype=np.bool_)
            has[offsets] = True
            self._has[space].fill(first, has)
            matrix = self._matrix.get(space)
            if matrix is None:
                if not held:
                    continue
                # The space's first vector: zeros for the slots before it.
                matrix = self._matrix[space] = _Column.of(np.float32, len(self._alive.values), dimension)
                self._norm[space] = _Column.of(np.float32, len(self._alive.values))
            vectors = np.zeros((len(rows), dimension), dtype=np.float32)
            if held:
                vectors[offsets] = np.stack([vector for _, vector in held])
            matrix.fill(first, vectors)
            self._norm[space].fill(first, np.sqrt(np.einsum("ij,ij->i", vectors, vectors)))
        sessions = [self._sessions.setdefault(m.session_id, len(self._sessions)) for m in memories]
        self._session.fill(first, sessions)
        for slot, (memory, session, row) in enumerate(zip(memories, sessions, rows, strict=True), first):
            self._slot_of[memory.id] = slot
            self._text_bytes += len(memory.content.encode())
            if memory.session_id:
                if session not in self._in_session:
                    self._in_session[session] = array("i")
                    self._list_bytes += 80
                self._in_session[session].append(slot)
                self._list_bytes += 4
                self._ordered.pop(session, None)
            self._list_bytes += 8 * len(row.lexemes)
            for lexeme, count in zip(row.lexemes, row.counts, strict=True):
                postings = self._postings.get(lexeme)
                if postings is None:
                    postings = self._postings[lexeme] = _Postings()
                    self._list_bytes += 120
                postings.slots.append(slot)
                postings.counts.append(count)
        self._memories.extend(memories)

    # -- the tenant's lexical statistics ---------------------------------------------------------------

    def statistics(self, terms: Sequence[str]) -> TermStatistics | None:
        """The statistics of `terms` as last kept (`keep_statistics`), None unless every term is known."""
        if self._totals is None or any(term not in self._df for term in terms):
            return None
        documents, total = self._totals
        return TermStatistics(documents, total, {t: df for t in terms if (df := self._df[t]) > 0})

    def keep_statistics(self, generation: int, terms: Sequence[str], statistics: TermStatistics) -> None:
        """Keeps what a recall read of the statistics while the index was at `generation`: nothing when
        it changed since (the read may predate the change) or the index holds one subject only."""
        if self.subject or generation != self.generation:
            return
        totals = (statistics.documents, statistics.terms)
        if totals != self._totals or len(self._df) + len(terms) > MAX_KEPT_TERMS:
            self._totals, self._df = totals, {}
        self._df.update((term, statistics.df.get(term, 0)) for term in terms)

    # -- what it holds -------------------------------------------------------------------------------

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._slot_of

    def ids(self) -> list[str]:
        """The ids of the memories held (every status)."""
        return list(self._slot_of)

    @property
    def live(self) -> int:
        return len(self._slot_of)

    @property
    def dead(self) -> int:
        return len(self._memories) - len(self._slot_of)

    @property
    def nbytes(self) -> int:
        """An estimate of the memory the index holds: its arrays exactly, its objects by measure."""
        arrays = [self._alive, self._status, self._tier, self._kind, self._shared, self._agent]
        arrays += [self._session, self._subject, self._created, self._spoken, self._expires, self._terms]
        arrays += [*self._has.values(), *self._matrix.values(), *self._norm.values()]
        held = self._list_bytes + self._text_bytes + _OBJECT_BYTES * len(self._slot_of)
        kept = sum(mask.nbytes for mask in self._masks.values())  # at most _MAX_MASKS bytes a slot
        return sum(a.values.nbytes for a in arrays) + held + kept

    # -- searches ------------------------------------------------------------------------------------

    def visible(self, scope: Scope) -> npt.NDArray[np.bool_]:
        """The slots a recall in `scope` may see, as store/channels.where_in_scope filters rows. The
        scope must be within this index (its tenant; its subject, unless it holds the whole tenant)
        and not look into the past (`as_of`): such recalls read the database."""
        if (
            scope.as_of is not None
            or scope.tenant_id != self.tenant_id
            or (self.subject and scope.subject != self.subject)
        ):
            raise ValueError("the index serves present-time recalls of its own tenant and subject only")
        n = len(self._memories)
        tiers, kinds = tuple(scope.tiers), tuple(scope.kinds)
        key = (n, scope.subject, tiers, kinds, scope.include_superseded, scope.window, scope.agent_id)
        timeless = self._masks.get(key)
        if timeless is None:
            if len(self._masks) >= _MAX_MASKS:
                self._masks.clear()
            timeless = self._masks[key] = self._timeless(scope, n)
        if not self._expiring:
            return timeless
        expiring: npt.NDArray[np.bool_] = timeless & (self._expires.values[:n] > _micros(scope.now))
        return expiring

    def _timeless(self, scope: Scope, n: int) -> npt.NDArray[np.bool_]:
        """`visible` but for the expiry: the part that holds until the index changes (read-only, kept)."""
        status = self._status.values[:n]
        seen = status == _STATUSES[Status.ACTIVE]
        if scope.include_superseded:
            seen |= status == _STATUSES[Status.SUPERSEDED]
        mask: npt.NDArray[np.bool_] = self._alive.values[:n] & seen
        agent = self._agents.get(scope.agent_id, -1)
        mask &= self._shared.values[:n] | (self._agent.values[:n] == agent)
        if scope.subject and not self.subject:
            mask &= self._subject.values[:n] == self._subjects.get(scope.subject, -1)
        if scope.tiers:
            mask &= np.isin(self._tier.values[:n], [_TIERS[t] for t in scope.tiers])
        if scope.kinds:
            mask &= np.isin(self._kind.values[:n], [_KINDS[k] for k in scope.kinds])
        if scope.window.start is not None:
            mask &= self._spoken.values[:n] >= _micros(scope.window.start)
        if scope.window.end is not None:
            mask &= self._spoken.values[:n] < _micros(scope.window.end)
        mask.flags.writeable = False
        return mask

    def _current(self, visible: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """`visible` (taken when a recall began) less the slots that died since: a recall's searches
        run between the looks of concurrent recalls, which may change the index under it. Slots added
        since are past the mask's end and not seen: that recall began before they were written."""
        current: npt.NDArray[np.bool_] = visible & self._alive.values[: len(visible)]
        return current

    def searched(self, space: VectorSpace, ask: NearestAsk) -> list[Scored]:
        """One ask's search, on the calling thread."""
        (found,) = nearest_slots(*self.matrix(space), [ask])
        return self.found(*found)

    def nearest_ask(
        self,
        visible: npt.NDArray[np.bool_],
        space: VectorSpace,
        query: FloatVector,
        limit: int,
        *,
        without: VectorSpace | None = None,
    ) -> NearestAsk | None:
        """What a vector search needs beside the matrix: the `limit` visible memories nearest to `query`
        by cosine in `space` (exact; `without`: only memories lacking a vector in that space), found by
        `searched` here or by pipelines/vector_searches.py off the event loop, several asks at once.
        None when it can find nothing."""
        n = len(visible)
        mask = self._current(visible) & self._has[space].values[:n]
        if without is not None:
            mask &= ~self._has[without].values[:n]
        candidates = np.flatnonzero(mask)
        query = np.asarray(query, dtype=np.float32)
        query_norm = float(np.linalg.norm(query))
        if not len(candidates) or limit <= 0 or query_norm == 0.0:
            return None
        return NearestAsk(candidates, query, query_norm, limit)

    def matrix(self, space: VectorSpace) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """The space's vectors and their norms, a row per slot so far. Views, safe to read on another
        thread while memories are added: slots are append-only, so no row read here is ever written
        again (a grown column is a new array; these views keep the old one)."""
        n = len(self._memories)
        if space not in self._matrix:  # no memory has a vector there
            return np.zeros((0, self._dimensions[space]), np.float32), np.zeros(0, np.float32)
        return self._matrix[space].values[:n], self._norm[space].values[:n]

    def found(self, slots: npt.NDArray[np.intp], scores: npt.NDArray[np.float64]) -> list[Scored]:
        """Search results by slot as memories, best first; a slot that died since the search began (its
        memory changed or removed meanwhile) is left out."""
        return [
            Scored(memory, float(score))
            for slot, score in zip(slots.tolist(), scores.tolist(), strict=True)
            if (memory := self._memories[slot]) is not None
        ]

    def lexical(
        self, visible: npt.NDArray[np.bool_], plan: Bm25Plan, bm25: Bm25, average_terms: float, limit: int
    ) -> list[Scored]:
        """BM25, as the lexical statement: the newest `bm25.match_rows` visible memories holding a match
        term are the candidates, each scored on every usable term; best first, then newest."""
        n = len(visible)
        holding = np.zeros(len(self._memories), dtype=np.bool_)
        for term in plan.match:
            postings = self._postings.get(term)
            if postings is not None:
                holding[np.frombuffer(postings.slots, dtype=np.int32)] = True
        candidates = np.flatnonzero(holding[:n] & self._current(visible))
        if not len(candidates) or limit <= 0:
            return []
        if len(candidates) > bm25.match_rows:
            newest = np.argsort(-self._created.values[candidates], kind="stable")[: bm25.match_rows]
            candidates = candidates[newest]
        lengths = self._terms.values[candidates]
        scores = np.zeros(len(candidates), dtype=np.float64)
        counts = np.zeros(len(self._memories), dtype=np.float64)
        for term, weight in plan.idf.items():
            postings = self._postings.get(term)
            if postings is None:
                continue
            slots = np.frombuffer(postings.slots, dtype=np.int32)
            counts[slots] = np.frombuffer(postings.counts, dtype=np.int32)
            tf = counts[candidates]
            scores += term_scores(tf, weight, lengths, average_terms, bm25)
            counts[slots] = 0.0
        order = np.lexsort((-self._created.values[candidates], -scores))[:limit]
        return self.found(candidates[order], scores[order])

    def adjacent(
        self, visible: npt.NDArray[np.bool_], memory_ids: Sequence[str]
    ) -> tuple[list[Memory], dict[str, tuple[str | None, str | None]]]:
        """The memories recorded right before and right after each given one in its session (by
        created_at, then id), kept when visible; and for each given id with a visible neighbour its
        (previous, next) ids, as store/channels.adjacent_turns answers."""
        found: dict[str, Memory] = {}
        adjacency: dict[str, tuple[str | None, str | None]] = {}
        seen = self._current(visible)
        ids = [memory_id for memory_id in memory_ids if memory_id in self._slot_of]
        at_slots = [self._slot_of[memory_id] for memory_id in ids]
        # One gather each, not a numpy scalar read per memory.
        sessions = self._session.values[at_slots].tolist()
        created = self._created.values[at_slots].tolist()
        for memory_id, session, moment in zip(ids, sessions, created, strict=True):
            if session == self._sessions[""]:
                continue
            keys, slots = self._session_order(session)
            at = bisect_left(keys, (moment, memory_id))  # itself
            sides: list[str | None] = []
            for side in (at - 1, at + 1):
                if 0 <= side < len(slots) and slots[side] < len(seen) and seen[slots[side]]:
                    neighbour = self._held(slots[side])
                    found[neighbour.id] = neighbour
                    sides.append(neighbour.id)
                else:
                    sides.append(None)
            if sides != [None, None]:
                adjacency[memory_id] = (sides[0], sides[1])
        return list(found.values()), adjacency

    def _session_order(self, session: int) -> tuple[list[tuple[int, str]], list[int]]:
        """A session's live slots in (created_at, id) order with their keys; sorted once, again after
        the session changed."""
        order = self._ordered.get(session)
        if order is None:
            live = [s for s in self._in_session[session] if self._alive.values[s]]
            keyed = sorted((int(self._created.values[s]), self._held(s).id, s) for s in live)
            order = self._ordered[session] = ([(at, i) for at, i, _ in keyed], [s for *_, s in keyed])
        return order

    def first_vectors(self, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]) -> Vectors:
        """Each memory's vector in the first of `spaces` it has one in, and in each companion space
        (domain/vectors.COMPANION_SPACES) whatever else it has (rows, not copies): what a channel's rows
        carry. One gather per space for all of them, not a lookup per memory."""
        vectors: Vectors = {space: {} for space in spaces}
        found = [(i, slot) for i in memory_ids if (slot := self._slot_of.get(i)) is not None]
        pending = found
        for space in spaces:
            companion = space in COMPANION_SPACES
            asked = found if companion else pending
            if not asked or space not in self._matrix:
                continue
            rows = self._matrix[space].values
            has = self._has[space].values[[slot for _, slot in asked]].tolist()
            into, rest = vectors[space], []
            for (memory_id, slot), held in zip(asked, has, strict=True):
                if held:
                    into[memory_id] = rows[slot]
                else:
                    rest.append((memory_id, slot))
            if not companion:
                pending = rest
        return vectors

    def _held(self, slot: int) -> Memory:
        memory = self._memories[int(slot)]
        if memory is None:  # a search only returns live slots (the visible mask excludes dead ones)
            raise LookupError(f"slot {slot} is dead")
        return memory


# Rows of the matrix multiplied by every query of a batch at once: a block this size stays in the core's
# cache while each query reads it, so a batch of k queries reads the matrix from memory once, not k times.
# Best of five on one quiet core, 10k x 384 floats: one query 0.25 ms (one product); three 0.51 ms in
# blocks of 512 rows, 0.54 in 256, 1.36 in one product; eight 0.79 ms in 256, 1.69 in 512. Fewer blocks
# also mean fewer hand-offs of the GIL, which the thread takes back after each one.
_BLOCK_ROWS = 512
_BLOCK_ROWS_MANY = 256  # past _MANY_ASKS queries
_MANY_ASKS = 4


def nearest_slots(
    matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], asks: Sequence[NearestAsk]
) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]]:
    """For each ask, its `limit` candidate slots nearest to its query by cosine, nearest first, with
    their cosines: one pass over `matrix` (a row per slot, `ScopeIndex.matrix`) for all of them. Numpy
    only, so it may run on a thread beside the event loop (BLAS releases the GIL)."""
    n = len(matrix)
    if len(asks) == 1:
        products = (matrix @ asks[0].query)[:, np.newaxis]
    else:
        queries = np.stack([ask.query for ask in asks], axis=1)  # one column per ask
        products = np.empty((n, len(asks)), dtype=np.float32)
        rows = _BLOCK_ROWS if len(asks) <= _MANY_ASKS else _BLOCK_ROWS_MANY
        for start in range(0, n, rows):
            np.dot(matrix[start : start + rows], queries, out=products[start : start + rows])
    found = []
    for column, ask in enumerate(asks):
        # Every slot a candidate (flatnonzero of a mask as long as the matrix): no gathers.
        every = len(ask.candidates) == n
        cosines = (products[:, column] if every else products[ask.candidates, column]).astype(np.float64)
        cosines /= (norms if every else norms[ask.candidates]) * ask.query_norm
        order = _best(cosines, ask.limit)
        found.append((ask.candidates[order], cosines[order]))
    return found


def _best(scores: npt.NDArray[np.float64], limit: int) -> npt.NDArray[np.intp]:
    """The positions of the `limit` highest scores, highest first."""
    if len(scores) > limit:
        top = np.argpartition(-scores, limit - 1)[:limit]
        return top[np.argsort(-scores[top], kind="stable")]
    return np.argsort(-scores, kind="stable")
