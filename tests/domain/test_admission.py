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


def test_a_lone_tenant_may_use_every_call_then_shares_them_evenly() -> None:
    admission = Admission(AdmissionPolicy(cost_per_s=0, max_calls=8, max_calls_per_tenant=16))
    for _ in range(8):
        assert admission.admit("noisy", 1, now=0.0) is None
    refused = admission.admit("noisy", 1, now=0.0)
    assert refused is not None and refused.limit == "calls" and refused.retry_after_s > 0
    assert "noisy" in refused.reason

    assert admission.admit("quiet", 1, now=0.1) is None  # a quiet tenant always finds room
    assert admission.share(0.1) == 4
    for _ in range(8):
        admission.release("noisy", now=0.2)
    admission.release("quiet", now=0.2)
    # The quiet one called within the window: the noisy one is held to half while it may call again.
    assert [admission.admit("noisy", 1, now=0.5) for _ in range(5)][-1] is not None
    assert admission.in_flight("noisy") == 4
    # Once the quiet tenant has been away a whole window, the server is the noisy one's again.
    assert admission.share(1.3) == 8


def test_the_share_is_never_above_the_per_tenant_limit() -> None:
    admission = Admission(AdmissionPolicy(cost_per_s=0, max_calls=64, max_calls_per_tenant=3))
    assert [admission.admit("a", 1, now=0.0) for _ in range(4)] == [
        None,
        None,
        None,
        admission.admit("a", 1, 0.0),
    ]
    assert admission.in_flight() == 3


def test_the_cost_bucket_refills_at_its_rate_and_a_dear_call_waits_for_a_full_one() -> None:
    admission = Admission(AdmissionPolicy(cost_per_s=100, burst=200, max_calls=0, max_calls_per_tenant=0))
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
        admission.release(f"t{index}", now=index * 1.0)
    assert len(admission._tenants) <= 101


def test_release_without_admit_changes_nothing() -> None:
    admission = Admission(AdmissionPolicy())
    admission.release("never", now=0.0)
    assert admission.in_flight() == 0 and admission.in_flight("never") == 0


def test_negative_limits_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="admission"):
        AdmissionPolicy(max_calls=-1)
