"""The rule-based session summary of working memory: goal, confirmed parameters, open items.

`summarize` folds the turns after the previous summary into it, so it works from the last few turns
kept in working memory: the previous summary carries what older turns settled. Rules, in turn order:

* Goal: the first user turn that asks for something (我要/帮我/请/I want/can you ..., or names a known
  intent such as 会议室 / flight). A known intent gives a fixed goal ("订会议室" / "book a meeting
  room") and the parameters it still needs; otherwise the goal is the request's clause as said.
* Parameters (slots.py) from each user turn override earlier ones ("改成周五" replaces 下周三; a bare
  weekday lands in the week of the date already agreed). Names add up unless the turn changes them
  (改成/换成/make it ...). A new part of the day drops a clock time outside it.
* A yes/no that opens a user turn answers the assistant's last proposal (an offer or a yes/no
  question): yes adopts the proposal's parameters, no leaves them out and opens "an alternative".
* Open items: the parameters the intent still lacks (a part of the day without a clock time leaves
  "具体时段" / "exact time"), then the assistant's questions no user turn has answered. A question
  about a parameter (几位? which building?) stays open until that parameter is known; any other
  question is answered by the next user turn.

`text` follows the design's line: 目标：订会议室；已确认：2025-01-22（周三）下午、10人、A栋；待确认：具体时段
(English: "Goal: ...; confirmed: ...; open: ..."), in the language most of the turns are in.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

from hindsight_server.domain.conversation import Role, Turn, session_language, validate_turns
from hindsight_server.domain.dialogue import (
    Answer,
    answer,
    asks_for,
    has_change_cue,
    is_proposal,
    questions,
    request_clause,
)
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.intents import find_intent, intent_by_key
from hindsight_server.domain.model import JsonValue
from hindsight_server.domain.numerals import EN_NUMBER, ZH_NUMBER, parse_number
from hindsight_server.domain.slots import KEYS, PLACE_KEYS, describe_all, extract, normalise, part_of_hour

__all__ = [
    "REFRESH_EVERY_TURNS",
    "RefreshDecision",
    "SessionSummary",
    "refresh_decision",
    "summarize",
]

REFRESH_EVERY_TURNS = 3  # docs/design.md: the summary is refreshed every 3 turns, or on a key entity change
ACCEPTED, REJECTED = "accepted", "rejected"


@dataclass(frozen=True, slots=True)
class SessionSummary:
    goal: str = ""
    intent: str = ""  # a known intent's key (intents.py), "" when the goal is free text
    confirmed: Mapping[str, JsonValue] = field(default_factory=dict)  # in slots.KEYS order, then others
    open_items: tuple[str, ...] = ()
    questions: tuple[str, ...] = ()  # the assistant's questions still unanswered (carried forward)
    decision: str = ""  # the user's last answer to a proposal: "accepted", "rejected" or ""
    language: str = "en"
    turn_count: int = 0  # the index of the last turn it covers
    text: str = ""
    updated_at: datetime | None = None


_LABELS = {
    "date": ("日期", "date"),
    "time": ("时间", "time"),
    "exact_time": ("具体时段", "exact time"),
    "people": ("人数", "number of people"),
    "place": ("地点", "place"),
    "participants": ("参与人", "participants"),
    "alternative": ("替代方案", "an alternative to the declined proposal"),
}
_CLOCK = re.compile(r"([0-9]{1,2}):[0-9]{2}")
_BARE_COUNT = re.compile(rf"^\s*(?P<n>{ZH_NUMBER}|{EN_NUMBER})\s*(?:个|位)?\s*[.!。!]?\s*$", re.IGNORECASE)


def _filled(slot: str, values: Mapping[str, JsonValue]) -> bool:
    if slot == "place":
        return any(key in values for key in PLACE_KEYS)
    return slot in values


def _ordered(values: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    known = {key: values[key] for key in KEYS if key in values}
    return known | {key: value for key, value in values.items() if key not in known}


@dataclass(slots=True)
class _State:
    """The summary being folded; private and mutable, one turn at a time."""

    goal: str
    intent: str
    values: dict[str, JsonValue]
    questions: list[str]
    decision: str
    proposal: dict[str, JsonValue] | None = None

    @classmethod
    def of(cls, previous: SessionSummary | None) -> _State:
        if previous is None:
            return cls("", "", {}, [], "")
        return cls(
            previous.goal,
            previous.intent,
            dict(previous.confirmed),
            list(previous.questions),
            previous.decision,
        )

    def anchor(self) -> date | None:
        value = self.values.get("date")
        try:
            return date.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            return None

    def merge(self, found: Mapping[str, JsonValue], *, change: bool) -> None:
        for key, value in found.items():
            earlier = self.values.get(key)
            if key == "participants" and not change and isinstance(earlier, list) and isinstance(value, list):
                value = list(dict.fromkeys([*earlier, *value]))
            self.values[key] = value
        clock = _CLOCK.match(str(self.values.get("time", "")))
        part = found.get("part_of_day")
        if part is not None and "time" not in found and clock and part_of_hour(int(clock[1])) != part:
            del self.values["time"]  # "改成上午" after 15:00
        self.values = _ordered(self.values)

    def assistant(self, turn: Turn, *, fresh: bool) -> None:
        self.proposal = None
        if is_proposal(turn.text):
            self.proposal = extract(turn.text, turn.occurred_at, self.anchor()) | dict(turn.entities)
        if fresh:
            self.questions = list(dict.fromkeys([*self.questions, *questions(turn.text)]))

    def user(self, turn: Turn) -> None:
        said = answer(turn.text)
        if said is not None and self.proposal is not None:
            if said is Answer.YES:
                self.merge(self.proposal, change=True)
            self.decision = ACCEPTED if said is Answer.YES else REJECTED
        self.proposal = None
        if not self.goal and not self.intent:
            intent = find_intent(turn.text)
            clause = request_clause(turn.text)
            if intent is not None or clause:
                self.intent = intent.key if intent else ""
                self.goal = clause or ""
        found = extract(turn.text, turn.occurred_at, self.anchor()) | dict(turn.entities)
        found |= self._bare_answer(turn.text, found)
        if found and self.decision == REJECTED:
            self.decision = ""  # the user gave an alternative
        self.merge(found, change=has_change_cue(turn.text))
        self.questions = [q for q in self.questions if asks_for(q) and not self._answered(q)]

    def _answered(self, question: str) -> bool:
        return all(_filled(slot, self.values) for slot in asks_for(question))

    def _bare_answer(self, text: str, found: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        """ "10" / "十个" right after "几位？": a count without its noun answers a question about people."""
        asked = self.questions[-1] if self.questions else ""
        match = _BARE_COUNT.match(normalise(text))
        if "people" in found or match is None or "people" not in asks_for(asked):
            return {}
        count = parse_number(match["n"])
        return {"people": count} if count is not None and 0 < count <= 1000 else {}


def _open_items(state: _State, lang: str) -> tuple[str, ...]:
    column = 0 if lang == "zh" else 1
    intent = intent_by_key(state.intent)
    missing: list[str] = []
    for slot in intent.required if intent else ():
        if slot == "time" and "time" not in state.values:
            missing.append("exact_time" if "part_of_day" in state.values else "time")
        elif slot != "time" and not _filled(slot, state.values):
            missing.append(slot)
    items = [_LABELS[slot][column] for slot in missing]
    listed = {"time" if slot == "exact_time" else slot for slot in missing}
    for question in state.questions:
        slots = set(asks_for(question))
        if not slots or not slots <= listed:
            items.append(question)
    if state.decision == REJECTED:
        items.append(_LABELS["alternative"][column])
    return tuple(dict.fromkeys(items))


def _render(goal: str, values: Mapping[str, JsonValue], open_items: Sequence[str], lang: str) -> str:
    phrases = describe_all(values, lang)
    if lang == "zh":
        parts = [f"目标：{goal}" if goal else "", "已确认：" + "、".join(phrases) if phrases else ""]
        parts.append("待确认：" + "、".join(open_items) if open_items else "")
        return "；".join(part for part in parts if part)
    parts = [f"Goal: {goal}" if goal else "", "confirmed: " + ", ".join(phrases) if phrases else ""]
    parts.append("open: " + ", ".join(open_items) if open_items else "")
    return "; ".join(part for part in parts if part)


def summarize(
    turns: Sequence[Turn], previous: SessionSummary | None = None, *, now: datetime
) -> SessionSummary:
    """The summary after `turns` (in index order), starting from `previous`. Turns the previous summary
    already covers (index <= previous.turn_count) are context only: an assistant proposal there can
    still be answered. Raises InvalidArgument for a turn without text or with a naive time."""
    validate_turns(turns)
    state = _State.of(previous)
    covered = previous.turn_count if previous else 0
    for turn in turns:
        fresh = turn.index > covered
        if turn.role is Role.ASSISTANT:
            state.assistant(turn, fresh=fresh)
        elif turn.role is Role.USER:
            if fresh:
                state.user(turn)
            else:
                state.proposal = None
    lang = session_language(turns) if turns else (previous.language if previous else "en")
    intent = intent_by_key(state.intent)
    goal = intent.goal(lang) if intent else state.goal
    open_items = _open_items(state, lang)
    return SessionSummary(
        goal=goal,
        intent=state.intent,
        confirmed=state.values,
        open_items=open_items,
        questions=tuple(state.questions),
        decision=state.decision,
        language=lang,
        turn_count=max([covered, *(turn.index for turn in turns)]),
        text=_render(goal, state.values, open_items, lang),
        updated_at=now,
    )


@dataclass(frozen=True, slots=True)
class RefreshDecision:
    refresh: bool
    reason: str  # "first", "key_entity_changed", "every_n_turns", or "" when not refreshed
    changed: tuple[str, ...] = ()  # the parameters (and "goal") that differ from the stored summary


def refresh_decision(
    stored: SessionSummary | None,
    current: SessionSummary,
    *,
    every_n_turns: int = REFRESH_EVERY_TURNS,
    key_entities: Collection[str] | None = None,
) -> RefreshDecision:
    """Whether `current` (summarize(turns, stored)) should replace the stored summary: the first one, a
    changed goal or key parameter (`key_entities`; None: every parameter), or every N turns."""
    if every_n_turns < 1:
        raise InvalidArgument("every_n_turns", "must be at least 1")
    if stored is None:
        return RefreshDecision(current.turn_count > 0, "first" if current.turn_count > 0 else "")
    keys = dict.fromkeys([*stored.confirmed, *current.confirmed])
    changed = [
        key
        for key in keys
        if (key_entities is None or key in key_entities)
        and stored.confirmed.get(key) != current.confirmed.get(key)
    ]
    if (stored.intent, stored.goal) != (current.intent, current.goal):
        changed.insert(0, "goal")
    if changed:
        return RefreshDecision(True, "key_entity_changed", tuple(changed))
    if current.turn_count - stored.turn_count >= every_n_turns:
        return RefreshDecision(True, "every_n_turns")
    return RefreshDecision(False, "")
