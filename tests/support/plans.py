"""Reading PostgreSQL's EXPLAIN (FORMAT JSON) plans in tests that check how a statement is run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def plan_nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of a plan (or of a list of plans), depth first."""
    if isinstance(plan, list):
        return [node for item in plan for node in plan_nodes(item)]
    if not isinstance(plan, dict):
        return []
    own = [plan] if "Node Type" in plan else []
    return own + [node for value in plan.values() for node in plan_nodes(value)]


def index_scans(plan: Any, columns: str = "") -> list[dict[str, Any]]:
    """The nodes that read an index whose name holds `columns` (a partition's index is named after its
    columns, e.g. memories_p03_tenant_id_subject_idx)."""
    return [node for node in plan_nodes(plan) if columns in node.get("Index Name", "\0")]


def rows_read(scans: list[dict[str, Any]]) -> float:
    """The rows the scans of an EXPLAIN ANALYZE read: those they handed over and those their filters
    removed, over every loop."""
    return float(
        sum(
            (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
            for node in scans
        )
    )


async def explained_and_rows(
    connection: Any, statement: str, arguments: Sequence[Any]
) -> tuple[Any, list[Any]]:
    """The statement's plan as it ran on `connection` (EXPLAIN ANALYZE, as JSON), then its rows."""
    explained = await connection.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *arguments)
    rows = await connection.fetch(statement, *arguments)
    return (json.loads(explained) if isinstance(explained, str) else explained), list(rows)
