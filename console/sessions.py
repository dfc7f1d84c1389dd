"""Logged-in sessions, kept on the console's server only: a random id in a cookie names one; the API
key stays here (never in a page, a URL or the cookie). Bounded: at most `capacity` sessions (the least
recently used goes first) and each ends after `idle_s` unused. Also the failed-login counter that keeps
a key from being guessed through the form."""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hindsight.client import HindsightClient

__all__ = ["LoginThrottle", "Session", "SessionTable"]

MAX_SESSION_ID_CHARS = 64  # a longer cookie value is no session of ours


@dataclass(slots=True)
class Session:
    session_id: str
    tenant: str
    api_key: str = field(repr=False)
    csrf_token: str = field(repr=False)
    last_used: float
    # Messages for the next page this session sees (after a redirect), at most a few.
    flashes: list[str] = field(default_factory=list)
    # Its typed client: carries the key, and the consistency tokens of what this session changed, so
    # that its next reads see it.
    client: HindsightClient | None = field(default=None, repr=False)

    def flash(self, message: str) -> None:
        self.flashes = [*self.flashes[-4:], message]

    def take_flashes(self) -> list[str]:
        taken, self.flashes = self.flashes, []
        return taken

    def csrf_matches(self, given: str) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.csrf_token.encode())


class SessionTable:
    def __init__(self, capacity: int, idle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._idle_s = idle_s
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, tenant: str, api_key: str) -> Session:
        session = Session(
            session_id=secrets.token_urlsafe(32),
            tenant=tenant,
            api_key=api_key,
            csrf_token=secrets.token_urlsafe(32),
            last_used=self._clock(),
        )
        self._sessions[session.session_id] = session
        while len(self._sessions) > self._capacity:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session of a cookie value (its idle time restarts), or None."""
        if not session_id or len(session_id) > MAX_SESSION_ID_CHARS:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_used >= self._idle_s:
            del self._sessions[session_id]
            return None
        session.last_used = now
        self._sessions.move_to_end(session_id)
        return session

    def end(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)


class LoginThrottle:
    """At most `per_minute` failed logins per client address in any minute; at most `addresses` tracked
    (the oldest forgotten first), so the table itself is bounded."""

    def __init__(
        self, per_minute: int, addresses: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._per_minute = per_minute
        self._addresses = addresses
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str) -> deque[float]:
        failures = self._failures.get(address)
        if failures is None:
            failures = self._failures[address] = deque()
            while len(self._failures) > self._addresses:
                self._failures.popitem(last=False)
        cutoff = self._clock() - 60.0
        while failures and failures[0] <= cutoff:
            failures.popleft()
        return failures

    def allowed(self, address: str) -> bool:
        return len(self._recent(address)) < self._per_minute

    def failed(self, address: str) -> None:
        self._recent(address).append(self._clock())
