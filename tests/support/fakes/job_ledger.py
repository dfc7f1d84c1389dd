"""An in-memory JobLedger (pipelines/ports.py): a set of held job locks, as the advisory locks of
store/jobs.py (taken at once or not at all, freed when the block ends however it ends), and the last run
of each job, as job_runs keeps it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from hindsight_server.domain.jobs import JobRun


@dataclass
class InMemoryJobLedger:
    held: set[str] = field(default_factory=set)
    runs: dict[str, JobRun] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def exclusive(self, job: str) -> AsyncIterator[bool]:
        if job in self.held:
            yield False
            return
        self.held.add(job)
        try:
            yield True
        finally:
            self.held.discard(job)

    async def started(self, job: str, at: datetime, server: str) -> None:
        self.runs[job] = JobRun(job, at, None, 0, server)

    async def finished(self, job: str, at: datetime, processed: int) -> None:
        if job in self.runs:
            self.runs[job] = replace(self.runs[job], finished_at=at, processed=processed)

    async def last_runs(self) -> dict[str, JobRun]:
        return dict(self.runs)
