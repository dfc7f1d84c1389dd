"""How the vector channel searches: the HNSW graph or an exact scan of the rows a recall may see.

HNSW walks the whole table's graph and discards the rows outside the recall's scope (another tenant,
another subject) as it goes, so finding k of a scope holding a share s of the table visits ~k / s graph
nodes: a cost that grows as the scope shrinks (b / s). An exact scan reads the scope's n rows through
an index and sorts them by distance (a x n). The exact scan is cheaper while a x n < b x N / n, that is
while n^2 < (b / a) x N. Measured at 1M memories on 2 cores (BENCHMARKS.md): a ~ 10 us a row, b ~ 1.9
ms, so b / a ~ 180: scopes under ~14,000 memories of 1M are searched exactly (50 ms instead of 300-650
ms for one of 5,800), one of 19,000 of 100,000 by its graph (13 ms instead of 170 ms).

The scope is the tenant and, when the recall names one, the subject: one user's memory is usually
most of its tenant, and a subject of 10,000 memories searched exactly cost 100 ms where its graph
walk cost 1 ms. The server counts the scope itself because PostgreSQL's estimate for `tenant_id = $1
AND subject = $2` cannot be trusted to choose (it multiplied the two selectivities: 376 rows
estimated for 10,000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hindsight_server.domain.model import VectorSpace


@dataclass(frozen=True, slots=True)
class ScopeSize:
    """What the server knows of a scope's size (a tenant, or one subject of it)."""

    rows: int  # the scope's active memories with a multilingual vector
    without_english: int  # those of them with no English vector (Chinese, or not yet embedded)
    table_rows: int  # the whole table (an estimate; -1 before the table was first analysed)

    def searched(self, space: VectorSpace, english_covers: bool) -> int:
        """The rows a search in `space` reads: an English search the rows with an English vector; a
        multilingual one after an English search (`english_covers`) only the rows without one."""
        if space is VectorSpace.ENGLISH:
            return self.rows - self.without_english
        return self.without_english if english_covers else self.rows


def split_limit(limit: int, size: ScopeSize) -> dict[VectorSpace, int]:
    """An English query's channel quota between its two searches, in proportion to the rows each can
    see (the multilingual search sees only the memories without an English vector), each at least 1
    while it has rows to find, so the channel returns `limit` memories as a single search would."""
    rows = max(size.rows, 1)
    multilingual = min(limit, math.ceil(limit * size.without_english / rows)) if size.without_english else 0
    english = limit - multilingual
    if english == 0 and size.rows > size.without_english:
        english, multilingual = 1, limit - 1
    return {VectorSpace.ENGLISH: english, VectorSpace.MULTILINGUAL: multilingual}


def prefers_exact_search(scope_rows: int, table_rows: int, factor: float) -> bool:
    """True when an exact scan of the scope's rows is expected to beat a filtered HNSW search.
    `table_rows` may be an estimate (or unknown, < scope_rows): it is never taken below the scope's
    own rows. factor 0 always searches the graph."""
    if factor <= 0:
        return False
    table = max(table_rows, scope_rows)
    return scope_rows <= math.sqrt(factor * table)
