"""A lifecycle job's last run, as job_runs records it for every server to schedule by. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["JobRun"]


@dataclass(frozen=True, slots=True)
class JobRun:
    job: str
    started_at: datetime
    finished_at: datetime | None  # None: running, or killed before it finished
    processed: int
    server: str
