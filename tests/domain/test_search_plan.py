"""How the vector channel searches: exactly or through the HNSW graph, and, for an English query, how
its quota is split between the English and the multilingual vectors."""

from __future__ import annotations

import pytest

from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.search_plan import ScopeSize, prefers_exact_search, split_limit


@pytest.mark.parametrize(
    ("tenant_rows", "table_rows", "factor", "exact"),
    [
        (5_800, 1_000_000, 180, True),  # measured: exact 50 ms, HNSW 300-650 ms
        (13_000, 1_000_000, 180, True),
        (15_000, 1_000_000, 180, False),
        (192_000, 1_000_000, 180, False),  # the largest tenant: the graph
        (19_000, 100_000, 180, False),  # measured: HNSW 13 ms, a sort of its rows 170 ms
        (4_000, 100_000, 180, True),
        (25, -1, 180, True),  # a table never analysed: its size taken as at least the tenant's
        (500, -1, 180, False),
        (0, 0, 180, True),  # an empty tenant: nothing to walk a graph for
        (25, 1_000_000, 0, False),  # factor 0: always the graph
    ],
)
def test_small_tenants_of_large_tables_are_scanned_exactly(
    tenant_rows: int, table_rows: int, factor: float, exact: bool
) -> None:
    assert prefers_exact_search(tenant_rows, table_rows, factor) is exact


EN, ML = VectorSpace.ENGLISH, VectorSpace.MULTILINGUAL


@pytest.mark.parametrize(
    ("rows", "without_english", "space", "english_covers", "searched"),
    [
        (10_000, 0, EN, True, 10_000),  # one user's English memory: all of it in the English space
        (10_000, 0, ML, True, 0),  # ... and nothing left for the multilingual search
        (10_000, 2_500, EN, True, 7_500),
        (10_000, 2_500, ML, True, 2_500),  # Chinese memories (or English ones not embedded yet)
        (10_000, 2_500, ML, False, 10_000),  # a Chinese query searches every memory
    ],
)
def test_a_search_reads_the_rows_its_space_can_see(
    rows: int, without_english: int, space: VectorSpace, english_covers: bool, searched: int
) -> None:
    assert ScopeSize(rows, without_english, 1_000_000).searched(space, english_covers) == searched


@pytest.mark.parametrize(
    ("rows", "without_english", "limit", "english", "multilingual"),
    [
        (40, 8, 20, 16, 4),  # in proportion to the rows each search can see
        (10_000, 1, 20, 19, 1),  # a single Chinese memory still gets a place
        (10_000, 10_000, 20, 0, 20),  # nothing has an English vector yet (an import being embedded)
        (10, 9, 20, 2, 18),
        (100, 99, 20, 1, 19),  # the one English vector keeps a place too
        (0, 0, 20, 20, 0),  # an empty scope
    ],
)
def test_an_english_querys_quota_follows_what_each_search_can_see(
    rows: int, without_english: int, limit: int, english: int, multilingual: int
) -> None:
    quota = split_limit(limit, ScopeSize(rows, without_english, 1_000_000))
    assert quota == {EN: english, ML: multilingual}
    assert sum(quota.values()) == limit
