"""What of a query text to search with.

Agents often pass the conversation so far as the query ("<Bart>: ...", "User: ..."). Then the user's
turns carry what to recall; the assistant's replies mostly echo and dilute it (MADial-Bench dev: dense
R@5 54.4 with the whole dialogue, 62.2 with the user's turns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TURN = re.compile(
    r"^[ \t]*(?:<([^<>\n]{1,40})>|([A-Za-z\u4e00-\u9fff][\w\u4e00-\u9fff ]{0,20}))[ \t]*[:：]\s*(.+)$", re.M
)
_ASSISTANTS = frozenset(
    {"assistant", "ai", "bot", "system", "model", "agent", "助手", "机器人", "客服", "系统"}
)
_QUOTES = "\"'“”‘’「」『』"
# The most user turns embedded one by one, the latest kept: each is an inference call per vector space
# on the shared tier, and a 4 KB query can hold 700 short turns. Dialogues passed as queries hold a
# handful (MADial-Bench dev: at most 5); earlier turns still count through the whole text.
MAX_EMBEDDED_TURNS = 8


@dataclass(frozen=True, slots=True)
class QueryFocus:
    text: str  # what the lexical channel and the main query embedding use
    turns: tuple[str, ...] = ()  # a dialogue's last user turns, each also embedded (best match counts)
    turns_left_out: int = 0  # earlier user turns not embedded on their own (past MAX_EMBEDDED_TURNS)


def focus(query: str) -> QueryFocus:
    """The user's turns when the query is a dialogue of two or more turns, else the query itself."""
    turns = [(first or second or "", said) for first, second, said in _TURN.findall(query)]
    if len(turns) < 2:
        return QueryFocus(query)
    users = [
        said.strip().strip(_QUOTES).strip()
        for speaker, said in turns
        if speaker.strip().lower() not in _ASSISTANTS
    ]
    users = [said for said in users if said]
    if not users:
        return QueryFocus(query)
    if len(users) == 1:
        return QueryFocus(users[0])
    kept = users[-MAX_EMBEDDED_TURNS:]
    return QueryFocus("\n".join(users), tuple(kept), len(users) - len(kept))
