"""An in-memory API key table (ApiKeyTable, pipelines/ports.py): store/tenants.py's rows by key id, with
how many lookups reached it, which is what the key cache in front of it saves."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from hindsight_server.domain.principal import ApiKeyRecord, Scope


@dataclass
class InMemoryApiKeys:
    keys: dict[str, ApiKeyRecord] = field(default_factory=dict)  # by key id
    lookups: int = 0  # find() calls: the database round trips of checking keys

    async def add(
        self,
        key_id: str,
        tenant_id: str,
        key_hash: bytes,
        label: str,
        now: datetime,
        *,
        scopes: frozenset[Scope],
        agent_id: str,
    ) -> None:
        self.keys[key_id] = ApiKeyRecord(key_id, tenant_id, key_hash, label, now, None, scopes, agent_id)

    async def find(self, key_id: str) -> ApiKeyRecord | None:
        self.lookups += 1
        return self.keys.get(key_id)

    async def list(self, tenant_id: str = "") -> list[ApiKeyRecord]:
        chosen = [k for k in self.keys.values() if not tenant_id or k.tenant_id == tenant_id]
        return sorted(chosen, key=lambda k: (k.tenant_id, k.created_at))

    async def revoke(self, key_id: str, now: datetime) -> bool:
        key = self.keys.get(key_id)
        if key is None or key.revoked_at is not None:
            return False
        self.keys[key_id] = replace(key, revoked_at=now)
        return True
