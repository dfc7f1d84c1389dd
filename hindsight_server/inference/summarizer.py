"""The optional LLM summarizer: an OpenAI-compatible chat endpoint that words the session summary.

Off by default and never required. The rule-based summary (domain/session_summary.py) still decides
what is settled (goal, confirmed parameters, open items); the model only writes the text an agent
reads, from the turns and that summary. Any failure (unreachable, slow, malformed answer) falls back
to the rule-based text, so a sick endpoint can never stall or break a session.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx2

from hindsight_server.domain.conversation import Turn
from hindsight_server.domain.session_summary import SessionSummary

log = logging.getLogger(__name__)

_INSTRUCTIONS = (
    "You keep an assistant's working memory of a conversation. Write ONE line in the conversation's "
    "language with: the user's goal, the parameters they confirmed (keep every value exactly as in the "
    "reference), and what is still open. No preamble."
)


class LlmSummarizer:
    def __init__(self, url: str, model: str, *, api_key: str = "", timeout_s: float = 2.0) -> None:
        self.name = "llm"
        self._url = url.rstrip("/") + "/chat/completions"
        self._model = model
        self._timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx2.AsyncClient(headers=headers, timeout=timeout_s)

    async def write(self, turns: Sequence[Turn], rules: SessionSummary) -> str | None:
        """The summary's text, or None (use the rule-based text) when the endpoint does not answer well."""
        conversation = "\n".join(f"{turn.role.value}: {turn.text}" for turn in turns)
        payload: dict[str, Any] = {
            "model": self._model,
            "temperature": 0,
            "max_tokens": 200,
            "messages": [
                {"role": "system", "content": _INSTRUCTIONS},
                {"role": "user", "content": f"Reference: {rules.text}\n\nConversation:\n{conversation}"},
            ],
        }
        try:
            response = await self._client.post(self._url, json=payload)
            response.raise_for_status()
            text = response.json()["choices"][0]["message"]["content"]
        except (httpx2.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            log.warning("LLM summarizer unavailable, using the rule-based summary: %s", exc)
            return None
        text = text.strip() if isinstance(text, str) else ""
        return text or None

    async def close(self) -> None:
        await self._client.aclose()
