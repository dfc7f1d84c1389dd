"""Counters of what the server refused or could not do: background work that failed (the embedding
worker's items, a lifecycle job's items), calls shed by admission control. Attributes are worker, job
and method names and error classes, never tenants or content."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from opentelemetry import metrics

__all__ = ["count_audit_dropped", "count_failure", "count_shed"]


@dataclass(frozen=True, slots=True)
class _Counters:
    background_failures: metrics.Counter
    shed: metrics.Counter
    audit_dropped: metrics.Counter


@functools.cache
def _counters() -> _Counters:
    # From the global meter provider's proxy: no-ops until an SDK is installed (as recorder.py's).
    meter = metrics.get_meter("hindsight_server")
    return _Counters(
        background_failures=meter.create_counter(
            "hindsight.background.failures",
            unit="{failure}",
            description="Background work items that failed: the embedding worker's, a lifecycle job's",
        ),
        shed=meter.create_counter(
            "hindsight.admission.shed",
            unit="{call}",
            description="Calls refused by admission control (attributes: method, limit)",
        ),
        audit_dropped=meter.create_counter(
            "hindsight.audit.dropped",
            unit="{recall}",
            description="Recall audit entries lost: the buffer was full, or its write kept failing",
        ),
    )


def count_failure(worker: str, error: BaseException, items: int = 1) -> None:
    """`worker`: the embedding worker, or a lifecycle job's name."""
    _counters().background_failures.add(
        items, {"hindsight.worker": worker, "error.type": type(error).__name__}
    )


def count_shed(method: str, limit: str) -> None:
    _counters().shed.add(1, {"rpc.method": method, "hindsight.limit": limit})


def count_audit_dropped(entries: int, reason: str) -> None:
    """`reason`: buffer_full (recalls faster than the database takes their audit) or write_failed."""
    _counters().audit_dropped.add(entries, {"hindsight.reason": reason})
