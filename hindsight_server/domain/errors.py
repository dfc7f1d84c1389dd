"""Domain errors. The transport maps each class to one gRPC status code in one table (rpc/errors.py).

Messages are written for the caller: they name the field or the resource, never carry a stack trace.
"""

from __future__ import annotations


class HindsightError(Exception):
    """Base of every error hindsight reports to a caller."""


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


class Aborted(HindsightError):
    """A concurrent change won (optimistic concurrency); the caller may re-read and retry."""


class Unauthenticated(HindsightError):
    """No credentials, or credentials that name no one (a missing, malformed, unknown or revoked key)."""


class PermissionDenied(HindsightError):
    """The caller is known but may not do this (its key belongs to another tenant)."""


class ResourceExhausted(HindsightError):
    """The caller is over a rate limit; safe to retry after a pause."""


class Unavailable(HindsightError):
    """A dependency (database, inference tier) cannot be reached; safe to retry."""


class DeadlineExceeded(HindsightError):
    """The work did not finish inside its time budget (statement timeout, inference deadline)."""


class InferenceUnavailable(Unavailable):
    """The inference tier cannot answer now. Writes defer their embeddings and recall answers from the
    other channels: unlike the database, the tier is never required to answer."""
