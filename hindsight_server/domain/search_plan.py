"""Which way the vector channel searches a tenant: the HNSW graph or an exact scan of the tenant's rows.

HNSW walks the whole table's graph and discards other tenants' rows as it goes, so finding k of a tenant
holding a share s of the table visits ~k / s graph nodes: a cost that grows as the tenant shrinks
(b / s). An exact scan reads the tenant's n rows through its index and sorts them by distance (a x n).
The exact scan is cheaper while a x n < b x N / n, that is while n^2 < (b / a) x N. Measured at 1M
memories on 2 cores (BENCHMARKS.md): a ~ 10 us a row, b ~ 1.9 ms, so b / a ~ 180: tenants under ~14,000
memories of 1M are searched exactly (50 ms instead of 300-650 ms for one of 5,800), a tenant of 19,000 of
100,000 by its graph (13 ms instead of 170 ms).
"""

from __future__ import annotations

import math


def prefers_exact_search(tenant_rows: int, table_rows: int, factor: float) -> bool:
    """True when an exact scan of the tenant's rows is expected to beat a filtered HNSW search.
    `table_rows` may be an estimate (or unknown, < tenant_rows): it is never taken below the tenant's
    own rows. factor 0 always searches the graph."""
    if factor <= 0:
        return False
    table = max(table_rows, tenant_rows)
    return tenant_rows <= math.sqrt(factor * table)
