"""A summarizer behind SummaryWriter (pipelines/ports.py) that words every summary the same way, or, when
its endpoint is down, answers None as the LLM summarizer does on any failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hindsight_server.domain.conversation import Turn
from hindsight_server.domain.session_summary import SessionSummary


@dataclass
class ScriptedSummarizer:
    wording: str  # "{turns}" becomes how many turns it read, "{rules}" the rules' text
    up: bool = True
    name: str = "llm"

    async def write(self, turns: Sequence[Turn], rules: SessionSummary) -> str | None:
        return self.wording.format(turns=len(turns), rules=rules.text) if self.up else None
