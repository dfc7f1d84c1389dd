"""How one claim of the embedding queue is shared between the tenants waiting (domain/vectors.py)."""

from __future__ import annotations

import pytest

from hindsight_server.domain.vectors import SHARE_ROUNDS, ShareRounds, more_due


def _rounds(tenants: list[str], limit: int, backlog: dict[str, int]) -> list[tuple[list[str], int]]:
    """The rounds a claim runs against tenants holding `backlog` rows due each."""
    rounds, seen = ShareRounds(tenants, limit), []
    left = dict(backlog)
    while (round_ := rounds.next()) is not None:
        active, share = round_
        seen.append((list(active), share))
        took = {tenant: min(share, left[tenant]) for tenant in active}
        for tenant, n in took.items():
            left[tenant] -= n
        rounds.took(took)
    return seen


@pytest.mark.parametrize(
    ("tenants", "limit", "backlog", "expected"),
    [
        # Equal shares, then what is left to the one that filled its share.
        (["a", "b", "c"], 12, {"a": 1, "b": 2, "c": 30}, [(["a", "b", "c"], 4), (["c"], 5)]),
        # Everyone fills the share and the batch: one round.
        (["a", "b"], 8, {"a": 10, "b": 10}, [(["a", "b"], 4)]),
        # A remainder: 10 over 3 tenants is 3 each, the 1 left to the first in turn.
        (["a", "b", "c"], 10, {"a": 9, "b": 9, "c": 9}, [(["a", "b", "c"], 3), (["a"], 1)]),
        # More tenants than rows: one each, in turn.
        (["a", "b", "c"], 2, {"a": 5, "b": 5, "c": 5}, [(["a", "b"], 1)]),
        # Nobody fills the share: no second round.
        (["a", "b"], 8, {"a": 1, "b": 1}, [(["a", "b"], 4)]),
    ],
)
def test_a_claim_is_shared_in_rounds(
    tenants: list[str], limit: int, backlog: dict[str, int], expected: list[tuple[list[str], int]]
) -> None:
    assert _rounds(tenants, limit, backlog) == expected


def test_rounds_are_bounded_whatever_the_backlog() -> None:
    # Backlogs that run dry one after another (shares of 7, 2, 1, 1) leave one row for a fifth round; the
    # claim stops after SHARE_ROUNDS instead, its batch a row short.
    backlog = {"a": 10, "b": 9, "c": 17, "d": 7, "e": 1}
    rounds = _rounds(list(backlog), 39, backlog)
    assert [share for _, share in rounds] == [7, 2, 1, 1] and len(rounds) == SHARE_ROUNDS


@pytest.mark.parametrize(
    ("claimed", "limit", "waiting", "more"),
    [
        (8, 8, 2, True),  # a full batch
        (3, 8, 8, True),  # as many tenants as the claim takes: others may wait their turn
        (3, 8, 2, False),
        (0, 8, 8, False),  # a claim of nothing never asks again at once
    ],
)
def test_more_is_due_after_a_full_batch_or_a_full_turn(
    claimed: int, limit: int, waiting: int, more: bool
) -> None:
    assert more_due(claimed, limit, waiting) is more
