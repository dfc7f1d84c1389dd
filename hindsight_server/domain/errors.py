"""Domain errors. The transport maps each class to one gRPC status code in one table (rpc/errors.py).

Messages are written for the caller: they name the field or the resource, never carry a stack trace.
What a program needs beyond the message is data here, sent by the transport as google.rpc details:
a `cause` (ErrorInfo), when to retry (RetryInfo), which precondition failed (PreconditionFailure).
"""

from __future__ import annotations

from dataclasses import dataclass


class HindsightError(Exception):
    """Base of every error hindsight reports to a caller. `cause`: a stable UPPER_SNAKE_CASE name of
    the cause for programs to branch on (sent as ErrorInfo.reason; empty: none is sent)."""

    cause: str = ""

    def __init__(self, *args: object, cause: str = "") -> None:
        super().__init__(*args)
        if cause:
            self.cause = cause


@dataclass(frozen=True, slots=True)
class Violation:
    """One failed precondition: its kind (`STATUS`, `IDEMPOTENCY_KEY`, ...), what it is about
    (`memories/<id>`), and why, for a person."""

    kind: str
    subject: str
    description: str


class InvalidArgument(HindsightError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotFound(HindsightError):
    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident!r} not found")
        self.what = what
        self.ident = ident


class FailedPrecondition(HindsightError):
    """The request is well formed but the resource is in a state that forbids it."""

    def __init__(self, message: str, *, violations: tuple[Violation, ...] = (), cause: str = "") -> None:
        super().__init__(message, cause=cause)
        self.violations = violations

    @classmethod
    def of(cls, kind: str, subject: str, message: str, *, cause: str) -> FailedPrecondition:
        """One failed precondition, its message for the caller and for the violation alike."""
        return cls(message, violations=(Violation(kind, subject, message),), cause=cause)


class OutOfRange(HindsightError):
    """A position outside what is kept (a feed cursor older than its retention)."""


class Aborted(HindsightError):
    """A concurrent change won (optimistic concurrency); the caller may re-read and retry."""

    cause = "CONCURRENT_CHANGE"


class Unauthenticated(HindsightError):
    """No credentials, or credentials that name no one (a missing, malformed, unknown or revoked key)."""

    cause = "API_KEY_INVALID"


class PermissionDenied(HindsightError):
    """The caller is known but may not do this: its key belongs to another tenant (the default cause),
    lacks the scope (SCOPE_MISSING) or is bound to another agent (AGENT_MISMATCH)."""

    cause = "TENANT_MISMATCH"


class RetryLater(HindsightError):
    """Safe to retry after `retry_after_s` seconds (sent as RetryInfo)."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0, cause: str = "") -> None:
        super().__init__(message, cause=cause)
        self.retry_after_s = retry_after_s


class ResourceExhausted(RetryLater):
    """The caller is over a rate limit; safe to retry after a pause."""

    cause = "RATE_LIMITED"


class Shed(ResourceExhausted):
    """Refused by admission control (a tenant's share or rate): the transport answers it after a short
    hold, so a client that resends at once cannot make the server refuse it every few milliseconds."""


class Unavailable(RetryLater):
    """A dependency (database, inference tier) cannot be reached; safe to retry."""


class DeadlineExceeded(HindsightError):
    """The work did not finish inside its time budget (statement timeout, inference deadline)."""


class InferenceUnavailable(Unavailable):
    """The inference tier cannot answer now. Writes defer their embeddings and recall answers from the
    other channels: unlike the database, the tier is never required to answer."""
