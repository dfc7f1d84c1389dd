"""Counters of what the server refused or could not do: lifecycle items a job failed on, calls shed by
admission control. Attributes are job names, methods and error classes, never tenants or content."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from opentelemetry import metrics

__all__ = ["count_job_item_failure", "count_shed"]


@dataclass(frozen=True, slots=True)
class _Counters:
    job_item_failures: metrics.Counter
    shed: metrics.Counter


@functools.cache
def _counters() -> _Counters:
    meter = metrics.get_meter("hindsight_server")
    return _Counters(
        job_item_failures=meter.create_counter(
            "hindsight.job.item_failures",
            description="Items a lifecycle job failed on and left for a later run (attributes: job, error)",
        ),
        shed=meter.create_counter(
            "hindsight.admission.shed",
            description="Calls refused by admission control (attributes: method, reason)",
        ),
    )


def count_job_item_failure(job: str, error: str) -> None:
    _counters().job_item_failures.add(1, {"hindsight.job": job, "error.type": error})


def count_shed(method: str, reason: str) -> None:
    _counters().shed.add(1, {"rpc.method": method, "hindsight.shed_reason": reason})
