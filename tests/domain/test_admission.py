"""Admission control, table-driven: the cost of a call, the shares of the tenants calling, the cost
bucket, and what a refusal says."""

from __future__ import annotations

import pytest

from hindsight_server.domain.admission import Admission, AdmissionPolicy, CallShape, call_cost
from hindsight_server.domain.errors import InvalidArgument


@pytest.mark.parametrize(
    ("shape", "cost"),
    [
        (CallShape("Get"), 1.0),
        (CallShape("Recall", items=10, request_bytes=100), 1.0 + 0.2 + 0.05 * 100 / 1024),
        (CallShape("Recall", items=100, request_bytes=4096), 1.0 + 2.0 + 0.2),
        (CallShape("WriteBatch", items=1000, request_bytes=8 * 1024 * 1024), 1.0 + 500 + 0.05 * 8192),
        (CallShape("Export"), 20.0),
        (CallShape("Unknown", items=-5), 1.0),
    ],
)
def test_a_call_costs_by_what_it_asks_for(shape: CallShape, cost: float) -> None:
    assert call_cost(shape) == pytest.approx(cost)


def test_items_past_the_batch_limit_are_not_weighed() -> None:
    assert call_cost(CallShape("WriteBatch", items=5_000)) == call_cost(CallShape("WriteBatch", items=1_000))


def _policy(**changes: float) -> AdmissionPolicy:
    values: dict[str, float] = {"cost_per_s": 0, "max_cost_in_flight": 8, "max_calls_per_tenant": 16}
    values.update(changes)
    return AdmissionPolicy(**values)  # type: ignore[arg-type]


def test_a_busy_server_holds_each_tenant_to_an_equal_share_of_cost() -> None:
    admission = Admission(_policy())
    for _ in range(4):
        assert admission.admit("noisy", 2, now=0.0) is None  # alone, it may fill the server
    refused = admission.admit("noisy", 2, now=0.0)
    assert refused is not None and refused.limit == "share" and refused.retry_after_s > 0
    assert "noisy" in refused.reason and "8.0 cost units" in refused.reason

    assert admission.admit("quiet", 1, now=0.1) is None  # nothing in flight: it always gets in
    assert admission.share("noisy", 0.1) == 4
    for _ in range(4):
        admission.release("noisy", 2, now=0.2)
    admission.release("quiet", 1, now=0.2)
    # The quiet one called within the window: between its calls the noisy one still gets only half.
    answers = [admission.admit("noisy", 2, now=0.5) for _ in range(5)]
    assert answers[:4] == [None] * 4 and answers[4] is not None  # 8 units: full, and over its half
    assert admission.in_flight("noisy") == 4
    for _ in range(4):
        admission.release("noisy", 2, now=0.6)
    assert [admission.admit("noisy", 3, now=0.7) for _ in range(3)][2] is not None  # 6 > 4: refused
    for _ in range(2):
        admission.release("noisy", 3, now=0.8)
    # Once the quiet tenant has been away a whole window, the server is the noisy one's again.
    assert admission.share("noisy", 1.7) == 8


def test_dear_calls_weigh_at_most_half_the_server() -> None:
    admission = Admission(_policy())
    assert admission.admit("bulk", 500, now=0.0) is None  # far past the server's cost: it counts 4
    assert admission.admit("bulk", 500, now=0.0) is None  # a lone load runs two batches side by side
    assert admission.admit("bulk", 1, now=0.0) is not None  # but not a third call
    assert admission.admit("other", 1, now=0.0) is None  # another tenant always gets in
    assert admission.admit("other", 500, now=0.0) is not None  # its share is half: 1 + 4 > 4
    admission.release("bulk", 500, now=0.1)
    assert admission.in_flight() == 2 and admission.in_flight("bulk") == 1


def test_a_tenant_never_has_more_than_its_limit_in_flight() -> None:
    admission = Admission(_policy(max_cost_in_flight=0, max_calls_per_tenant=3))
    answers = [admission.admit("a", 1, now=0.0) for _ in range(4)]
    assert answers[:3] == [None, None, None]
    assert answers[3] is not None and answers[3].limit == "tenant_calls"
    assert admission.in_flight() == 3


def test_the_cost_bucket_refills_at_its_rate_and_a_dear_call_waits_for_a_full_one() -> None:
    admission = Admission(
        AdmissionPolicy(cost_per_s=100, burst=200, max_cost_in_flight=0, max_calls_per_tenant=0)
    )
    assert admission.admit("t", 150, now=0.0) is None
    refused = admission.admit("t", 100, now=0.0)
    assert refused is not None and refused.limit == "rate"
    assert refused.retry_after_s == pytest.approx(0.5)  # 50 left, 100 needed, 100 a second
    assert admission.admit("t", 100, now=0.5) is None
    assert admission.admit("t", 10_000, now=0.5) is not None  # dearer than the burst: needs it full
    assert admission.admit("t", 10_000, now=2.5) is None
    assert admission.admit("other", 150, now=2.5) is None  # each tenant has its own bucket


def test_many_tenants_do_not_grow_the_state_without_bound() -> None:
    admission = Admission(AdmissionPolicy(cost_per_s=10, burst=10), max_tenants=100)
    for index in range(10_000):
        assert admission.admit(f"t{index}", 1, now=index * 1.0) is None
        admission.release(f"t{index}", 1, now=index * 1.0)
    assert len(admission._tenants) <= 101


def test_release_without_admit_changes_nothing() -> None:
    admission = Admission(AdmissionPolicy())
    admission.release("never", 1, now=0.0)
    assert admission.in_flight() == 0 and admission.in_flight("never") == 0


def test_negative_limits_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="admission"):
        AdmissionPolicy(max_cost_in_flight=-1)
