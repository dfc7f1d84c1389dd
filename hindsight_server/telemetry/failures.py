"""Failures of background work (the embedding worker's items, its rounds), counted by worker and error
class in `hindsight.background.failures`, so a stuck worker shows on a dashboard, not only in a log.
Attributes are names only, never content."""

from __future__ import annotations

import functools

from opentelemetry import metrics

__all__ = ["count_failure"]


@functools.cache
def _counter() -> metrics.Counter:
    # From the global meter provider's proxy: a no-op until an SDK is installed (as recorder.py's).
    return metrics.get_meter("hindsight_server").create_counter(
        "hindsight.background.failures", unit="{failure}", description="background work items that failed"
    )


def count_failure(worker: str, error: BaseException, items: int = 1) -> None:
    _counter().add(items, {"hindsight.worker": worker, "error.type": type(error).__name__})
