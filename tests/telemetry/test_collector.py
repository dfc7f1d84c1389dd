"""The garbage collector's pauses and the start-up freeze (telemetry/collector.py), on the real gc."""

from __future__ import annotations

import gc

import pytest
from pydantic import ValidationError

from hindsight_server.config import Settings
from hindsight_server.telemetry.collector import CollectorPauses, freeze_started
from hindsight_server.telemetry.window import LatencyWindow


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_each_collection_is_recorded_while_installed_and_none_after() -> None:
    pauses = CollectorPauses(LatencyWindow(60, max_samples=100))
    pauses.install()
    pauses.install()  # once only
    try:
        for _ in range(3):
            _Cycle()
            gc.collect()
        summary = pauses.window.summary()
        assert summary is not None and summary.count == 3 and summary.max_ms >= 0
    finally:
        pauses.remove()
    gc.collect()
    after = pauses.window.summary()
    assert after is not None and after.count == 3
    pauses.remove()  # twice is harmless


def test_the_started_objects_are_frozen_and_a_full_collection_walks_the_rest() -> None:
    before = len(gc.get_objects())
    thresholds = gc.get_threshold()
    try:
        frozen = freeze_started((50_000, 20, 100))
        assert frozen == gc.get_freeze_count() > 10_000
        assert len(gc.get_objects()) < before - frozen // 2  # gc.get_objects() lists what it still walks
        assert gc.get_threshold() == (50_000, 20, 100)
        _Cycle()
        assert gc.collect() >= 1  # what is made after the freeze is collected as before
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert gc.get_freeze_count() == 0


def test_the_thresholds_are_validated_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().server.gc_thresholds == (10_000, 20, 100)
    monkeypatch.setenv("HINDSIGHT_SERVER__GC_THRESHOLDS", "[700, 10, 10]")
    assert Settings().server.gc_thresholds == (700, 10, 10)
    monkeypatch.setenv("HINDSIGHT_SERVER__GC_THRESHOLDS", "[0, 10, 10]")  # 0 would turn the collector off
    with pytest.raises(ValidationError, match="gc_thresholds"):
        Settings()
