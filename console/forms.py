"""What a page's query string or form may hold, read into typed values with an explicit bound on every
field; FieldError names the field and says what is allowed. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "KINDS",
    "MAX_BULK_IDS",
    "STATUSES",
    "TIERS",
    "FieldError",
    "MemoryFilter",
    "RecallForm",
    "bounded_text",
    "memory_filter",
    "memory_id",
    "memory_ids",
    "recall_form",
    "time_field",
]

TIERS = ("working", "episodic", "semantic")
KINDS = ("fact", "preference", "event", "task", "summary", "instruction")
STATUSES = ("active", "pending", "superseded", "expired", "deleted")
PAGE_SIZES = (10, 25, 50, 100, 200)
MAX_IDENTIFIER = 256  # tenant, subject, session, profile: as the servers' identifiers
MAX_TEXT_FILTER = 200
MAX_QUERY = 4000
MAX_PAGE_TOKEN = 2048
MAX_TOP_K = 100
MAX_TOKEN_BUDGET = 32_000  # the servers' limits.max_token_budget
MAX_BULK_IDS = 200
MAX_REASON = 500
_MEMORY_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


class FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def bounded_text(values: Mapping[str, str], field: str, limit: int, *, required: bool = False) -> str:
    value = values.get(field, "").strip()
    if len(value) > limit:
        raise FieldError(field, f"at most {limit} characters (got {len(value)})")
    if required and not value:
        raise FieldError(field, "required")
    if "\x00" in value:
        raise FieldError(field, "must not contain NUL characters")
    return value


def _choice(values: Mapping[str, str], field: str, allowed: Sequence[str]) -> str:
    value = values.get(field, "").strip().lower()
    if value and value not in allowed:
        raise FieldError(field, f"one of {', '.join(allowed)} (got {value[:40]!r})")
    return value


def time_field(values: Mapping[str, str], field: str) -> datetime | None:
    value = bounded_text(values, field, 40)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise FieldError(field, "a date and time such as 2026-03-01T09:30 (UTC)") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _integer(values: Mapping[str, str], field: str, low: int, high: int, default: int) -> int:
    value = values.get(field, "").strip()
    if not value:
        return default
    if len(value) > 12 or not value.isdigit():
        raise FieldError(field, f"a whole number from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise FieldError(field, f"a whole number from {low} to {high} (got {number})")
    return number


def memory_id(value: str, field: str = "id") -> str:
    if not _MEMORY_ID.fullmatch(value):
        raise FieldError(field, "a memory id (letters, digits, - and _, at most 64)")
    return value


def memory_ids(values: Sequence[str], field: str = "ids") -> list[str]:
    if len(values) > MAX_BULK_IDS:
        raise FieldError(field, f"at most {MAX_BULK_IDS} memories at once (got {len(values)})")
    return list(dict.fromkeys(memory_id(value, field) for value in values))


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    subject: str
    tier: str = ""
    kind: str = ""
    status: str = ""
    text: str = ""
    since: datetime | None = None
    until: datetime | None = None
    page_size: int = 50
    page_token: str = ""

    @property
    def filters_in_console(self) -> bool:
        """Text and time are not List's filters: the console reads pages and keeps the matching ones."""
        return bool(self.text or self.since or self.until)

    def matches(self, content: str, created_at: datetime) -> bool:
        if self.text and self.text.casefold() not in content.casefold():
            return False
        if self.since is not None and created_at < self.since:
            return False
        return self.until is None or created_at < self.until

    def query(self, **changes: str) -> dict[str, str]:
        """The filter as query parameters (for links to its next page), with `changes` applied."""
        values = {
            "subject": self.subject,
            "tier": self.tier,
            "kind": self.kind,
            "status": self.status,
            "text": self.text,
            "since": self.since.strftime("%Y-%m-%dT%H:%M") if self.since else "",
            "until": self.until.strftime("%Y-%m-%dT%H:%M") if self.until else "",
            "page_size": str(self.page_size),
            **changes,
        }
        return {key: value for key, value in values.items() if value}


def memory_filter(values: Mapping[str, str]) -> MemoryFilter:
    page_size = _integer(values, "page_size", PAGE_SIZES[0], PAGE_SIZES[-1], 50)
    if page_size not in PAGE_SIZES:
        raise FieldError("page_size", f"one of {', '.join(map(str, PAGE_SIZES))}")
    since, until = time_field(values, "since"), time_field(values, "until")
    if since is not None and until is not None and until <= since:
        raise FieldError("until", "must be later than since")
    return MemoryFilter(
        subject=bounded_text(values, "subject", MAX_IDENTIFIER),
        tier=_choice(values, "tier", TIERS),
        kind=_choice(values, "kind", KINDS),
        status=_choice(values, "status", STATUSES),
        text=bounded_text(values, "text", MAX_TEXT_FILTER),
        since=since,
        until=until,
        page_size=page_size,
        page_token=bounded_text(values, "page_token", MAX_PAGE_TOKEN),
    )


@dataclass(frozen=True, slots=True)
class RecallForm:
    query: str
    subject: str = ""
    session_id: str = ""
    profile: str = ""
    token_budget: int = 0
    top_k: int = 0
    expected: str = ""


def recall_form(values: Mapping[str, str]) -> RecallForm:
    expected = bounded_text(values, "expected", 64)
    return RecallForm(
        query=bounded_text(values, "query", MAX_QUERY, required=True),
        subject=bounded_text(values, "subject", MAX_IDENTIFIER),
        session_id=bounded_text(values, "session", MAX_IDENTIFIER),
        profile=bounded_text(values, "profile", MAX_IDENTIFIER),
        token_budget=_integer(values, "budget", 0, MAX_TOKEN_BUDGET, 0),
        top_k=_integer(values, "top_k", 0, MAX_TOP_K, 0),
        expected=memory_id(expected, "expected") if expected else "",
    )
