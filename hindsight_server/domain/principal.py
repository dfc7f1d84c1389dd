"""Who a call acts as, and what it may do: the scopes an API key grants and the agent it may be bound
to. Pure: the transport finds the principal (rpc/auth.py), the pipelines receive it as a value.

Scopes, each a kind of act: `read` (Get, List, Recall, History, Summarize), `write` (Write, WriteBatch,
Update, Delete, AppendTurn, EndSession, ConfirmPending, RejectPending), `export` (Export), `erase`
(Erase) and `admin` (Import, which restores memories of any agent with their ids and version links, and
the server-wide Ops/Status, and the Webhooks service: where the tenant's events are sent).

A key bound to an agent acts as that agent only: a request naming another agent is refused, an empty
`agent_id` becomes the bound one, so PRIVATE memories are seen by the agent that wrote them and nobody
else. A key bound to no agent acts for the whole tenant (the service or administrator mode): it may name
any agent, as every key could before keys had bindings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from hindsight_server.domain.errors import InvalidArgument, PermissionDenied

__all__ = ["ALL_SCOPES", "DEFAULT_SCOPES", "UNRESTRICTED", "Principal", "Scope", "parse_scopes"]


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    EXPORT = "export"
    ERASE = "erase"
    ADMIN = "admin"


ALL_SCOPES = frozenset(Scope)
# What a new key gets unless asked otherwise: an agent's everyday work, nothing tenant-wide.
DEFAULT_SCOPES = frozenset({Scope.READ, Scope.WRITE})


def parse_scopes(names: Iterable[str], field: str = "scopes") -> frozenset[Scope]:
    """Scope names ("read", "write", ...) as a set; InvalidArgument naming `field` for an unknown one or
    none at all."""
    known = {scope.value for scope in Scope}
    wanted = [name.strip().lower() for name in names if name.strip()]
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise InvalidArgument(field, f"unknown scope {', '.join(unknown)}; known: {', '.join(Scope)}")
    if not wanted:
        raise InvalidArgument(field, f"name at least one of {', '.join(Scope)}")
    return frozenset(Scope(name) for name in wanted)


@dataclass(frozen=True, slots=True)
class Principal:
    """`key_id` empty: a call let in without a key (security.require_api_keys off), which may do
    anything. `agent_id` empty: not bound to an agent."""

    scopes: frozenset[Scope]
    key_id: str = ""
    agent_id: str = ""

    def require(self, scope: Scope, what: str) -> None:
        if scope not in self.scopes:
            granted = ", ".join(sorted(self.scopes)) or "none"
            raise PermissionDenied(
                f"{what} needs an API key with the {scope} scope (this key has: {granted})",
                cause="SCOPE_MISSING",
            )

    def agent_for(self, requested: str, field: str) -> str:
        """The agent a request acts as: the bound one (a request naming another is refused), or the
        requested one for a key bound to none."""
        if not self.agent_id:
            return requested
        if requested and requested != self.agent_id:
            raise PermissionDenied(
                f"{field}: this API key acts as agent {self.agent_id!r} only, not {requested!r}",
                cause="AGENT_MISMATCH",
            )
        return self.agent_id

    @property
    def viewer(self) -> str | None:
        """Whose PRIVATE memories a tenant-wide read (Export) may include: the bound agent's only, or
        (None) every agent's for a key bound to none."""
        return self.agent_id or None


# A call let in without a key: the embedded single-user mode.
UNRESTRICTED = Principal(ALL_SCOPES)


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key as stored: only the SHA-256 of its secret, never the secret."""

    key_id: str
    tenant_id: str
    key_hash: bytes
    label: str
    created_at: datetime
    revoked_at: datetime | None
    scopes: frozenset[Scope]
    agent_id: str  # "": bound to no agent
