"""The pure parts of read routing (store/routing.py) and of its wire form (hindsight/consistency.py):
the replica lag from the primary's sampled positions, and the consistency tokens, table-driven."""

from __future__ import annotations

import pytest

from hindsight.consistency import TRAILER, ReadYourWrites, decode_token, encode_token, later_token
from hindsight_server.store.routing import replica_lag

SAMPLES = [(10.0, 100), (10.5, 100), (11.0, 180), (11.5, 250)]  # (time, primary position), oldest first


@pytest.mark.parametrize(
    ("samples", "replayed", "now", "lag"),
    [
        ([], 0, 12.0, 0.0),  # nothing sampled yet: nothing known to be missing
        (SAMPLES, 250, 12.0, 0.0),  # has the latest position
        (SAMPLES, 400, 12.0, 0.0),  # past it (the primary moved on since the last sample)
        (SAMPLES, 180, 12.0, 0.5),  # misses what the primary had at 11.5
        (SAMPLES, 120, 12.0, 1.0),  # misses what it had at 11.0
        (SAMPLES, 100, 12.0, 1.0),  # an idle stretch (10.0-10.5 at 100) is not lag
        (SAMPLES, 99, 12.0, None),  # behind the oldest sample kept: how far is unknown
        ([(10.0, 100)], 100, 99.0, 0.0),  # an idle primary never makes a replica look behind
    ],
)
def test_replica_lag(samples: list[tuple[float, int]], replayed: int, now: float, lag: float | None) -> None:
    assert replica_lag(samples, replayed, now) == lag


@pytest.mark.parametrize(
    ("database", "position"), [(0, 0), (7714386074416616721, 24060712), (2**64 - 1, 2**64 - 1)]
)
def test_a_token_names_its_database_and_position(database: int, position: int) -> None:
    token = encode_token(database, position)
    assert decode_token(token) == (database, position)
    assert token.startswith("c1.") and len(token) == 25


@pytest.mark.parametrize(
    ("token", "complaint"),
    [
        ("", "is not a consistency token"),
        ("c1", "is not a consistency token"),
        ("c2.AAAAAAAAAAAAAAAAAAAAAA", "is not a consistency token"),
        ("c1.!!!!", "not base64url"),
        ("c1.AAAA", "wrong length"),
    ],
)
def test_what_is_not_a_token_says_so(token: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        decode_token(token)


A, B = encode_token(1, 100), encode_token(1, 200)
OTHER = encode_token(2, 50)


@pytest.mark.parametrize(
    ("current", "received", "kept"),
    [
        ("", A, A),
        (A, B, B),
        (B, A, B),  # an answer that arrives late does not move the position back
        (A, A, A),
        (B, OTHER, OTHER),  # a new deployment: the old position can never be met again
        ("garbage", A, A),
    ],
)
def test_the_later_token_is_kept(current: str, received: str, kept: str) -> None:
    assert later_token(current, received) == kept


def test_read_your_writes_keeps_a_token_per_tenant_and_forgets_the_oldest_tenant() -> None:
    tracked = ReadYourWrites(max_tenants=2)
    tracked.observe("a", [("x-other", "1"), (TRAILER, A)])
    tracked.observe("b", [(TRAILER, B.encode())])
    tracked.observe("a", [(TRAILER, B)])
    tracked.observe("a", None)  # a call whose answer carried no token changes nothing
    assert (tracked.token("a"), tracked.token("b")) == (B, B)
    tracked.observe("c", [(TRAILER, A)])  # "b" was written longest ago
    assert (tracked.token("a"), tracked.token("b"), tracked.token("c")) == (B, "", A)
