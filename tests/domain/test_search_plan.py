"""When the vector channel scans a tenant exactly instead of walking the HNSW graph."""

from __future__ import annotations

import pytest

from hindsight_server.domain.search_plan import prefers_exact_search


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
