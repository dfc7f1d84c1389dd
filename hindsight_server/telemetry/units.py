"""Durations in OpenTelemetry's unit, the second, and the histograms' bucket boundaries for them (the
SDK's default boundaries, 0 to 10,000, suit milliseconds: in seconds nearly everything would fall in
the first bucket)."""

from __future__ import annotations

__all__ = ["DB_OPERATION_BUCKETS_S", "STAGE_BUCKETS_S", "seconds"]

# The stages of a recall or write, and whole ones: 0.5 ms (fuse, rerank) to 10 s, finer around the
# recall target (80 ms).
STAGE_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
# What OpenTelemetry's database conventions advise for db.client.operation.duration.
DB_OPERATION_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)


def seconds(milliseconds: float) -> float:
    return milliseconds / 1000
