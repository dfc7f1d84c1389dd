from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.ids import new_memory_id
from hindsight_server.domain.lifecycle import default_expiry, initial_status
from hindsight_server.domain.model import Kind, ListQuery, PageCursor, Status, Tier
from hindsight_server.domain.paging import decode_page_token, encode_page_token
from hindsight_server.domain.policy import TtlPolicy, WritePolicy

NOW = datetime(2025, 1, 15, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tier", "kind", "lifetime"),
    [
        (Tier.WORKING, Kind.FACT, timedelta(hours=24)),
        (Tier.WORKING, Kind.PREFERENCE, timedelta(hours=24)),  # working memory is always short-lived
        (Tier.EPISODIC, Kind.FACT, timedelta(days=30)),
        (Tier.EPISODIC, Kind.EVENT, timedelta(days=90)),
        (Tier.EPISODIC, Kind.PREFERENCE, None),
        (Tier.SEMANTIC, Kind.FACT, None),
        (Tier.SEMANTIC, Kind.EVENT, timedelta(days=90)),
    ],
)
def test_default_expiry(tier: Tier, kind: Kind, lifetime: timedelta | None) -> None:
    expected = None if lifetime is None else NOW + lifetime
    assert default_expiry(tier, kind, NOW, TtlPolicy()) == expected


@pytest.mark.parametrize(
    ("confidence", "status"), [(0.69, Status.PENDING), (0.7, Status.ACTIVE), (1.0, Status.ACTIVE)]
)
def test_low_confidence_waits_in_pending(confidence: float, status: Status) -> None:
    assert initial_status(confidence, WritePolicy()) is status


def test_page_tokens_round_trip_and_are_bound_to_their_filters() -> None:
    query = ListQuery(tenant_id="acme", subject="user-7", tiers=(Tier.SEMANTIC,))
    cursor = PageCursor(NOW, "01a22b18-e375-7426-afa1-f923854e099a")
    token = encode_page_token(cursor, query)
    assert decode_page_token(token, query) == cursor
    with pytest.raises(InvalidArgument, match="different filters"):
        decode_page_token(token, ListQuery(tenant_id="other", subject="user-7", tiers=(Tier.SEMANTIC,)))


@pytest.mark.parametrize("token", ["garbage", "e30", "W10", "eyJ0IjoxfQ", "!!!!"])
def test_malformed_page_tokens(token: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        decode_page_token(token, ListQuery(tenant_id="acme"))
    assert error.value.field == "page_token"


def test_memory_ids_are_uuid7_and_time_ordered() -> None:
    ids = [new_memory_id() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(i[14] == "7" and i[19] in "89ab" for i in ids)
    prefixes = [i[:13] for i in ids]  # the 48-bit millisecond timestamp
    assert prefixes == sorted(prefixes)
    # Monotonic, within a millisecond too: a batch's memories, which share a time, keep its order.
    assert ids == sorted(ids)
