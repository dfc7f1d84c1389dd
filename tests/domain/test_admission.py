"""Admission control, table-driven: the cost of a call, the shares of the tenants calling, the cost
bucket, and what a refusal says."""

from __future__ import annotations

import math

import pytest

from hindsight_server.domain.admission import Admission, AdmissionPolicy, CallShape, call_cost
from hindsight_server.domain.errors import InvalidArgument


@pytest.mark.parametrize(
    ("shape", "cost"),
    [
        (CallShape("Get"), 1.0),
        (CallShape("Recall", items=10, request_bytes=100), 1.0 + 0.2 + 2.5 * 100 / 1024),
        # A long query is embedded at length: ~12x a short recall's work.
        (CallShape("Recall", items=100, request_bytes=4096), 1.0 + 2.0 + 10.0),
        (CallShape("WriteBatch", items=1000, request_bytes=8 * 1024 * 1024), 1.0 + 500 + 0.35 * 8192),
        (CallShape("List", items=100, request_bytes=1024), 1.0 + 0.5 + 0.05),
        (CallShape("Export"), 20.0),
        # A recall whose 30 best the cross-encoder rescores: the tier's main work on CPU, little on a GPU.
        (CallShape("Recall", items=10, rerank_pairs=30), 1.0 + 0.2 + 30 * 0.8),
        (CallShape("Recall", items=10, rerank_pairs=30, rerank_on_gpu=True), 1.0 + 0.2 + 30 * 0.02),
        (CallShape("Recall", items=10, rerank_pairs=-3), 1.0 + 0.2),
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


def test_asking_whether_a_call_would_be_refused_takes_nothing() -> None:
    admission = Admission(_policy(max_calls_per_tenant=2))
    assert admission.refusal("noisy", 1, now=0.0) is None
    assert admission.in_flight("noisy") == 0  # asked, not admitted
    assert admission.admit("noisy", 1, now=0.0) is None
    assert admission.admit("noisy", 1, now=0.0) is None
    refused = admission.refusal("noisy", 1, now=0.0)
    assert refused is not None and refused.limit == "tenant_calls"
    assert admission.in_flight() == 2
    admission.release("noisy", 1, now=0.1)
    assert admission.refusal("noisy", 1, now=0.1) is None


def test_asking_leaves_the_bucket_as_it_was() -> None:
    admission = Admission(_policy(cost_per_s=1, burst=2))
    for _ in range(5):
        assert admission.refusal("metered", 2, now=0.0) is None
    assert admission.admit("metered", 2, now=0.0) is None  # the bucket was still full
    refused = admission.refusal("metered", 1, now=0.0)
    assert refused is not None and refused.limit == "rate" and refused.retry_after_s == pytest.approx(1)


def test_past_the_work_a_server_sustains_each_tenant_is_held_to_its_share_of_it() -> None:
    """100 units a second sustained, rates over a 1 s window: one stream of dear calls (one in flight at
    a time, which the in-flight rules always let in) is held to half once another tenant calls, and
    gets the whole server back when it is alone. The quiet one's own use (1/s) is left to it first."""
    admission = Admission(_policy(max_cost_in_flight=0, server_cost_per_s=100, share_window_s=1))
    now = 0.0
    for _ in range(3):  # alone: the server is its own, past what it sustains or not
        assert admission.admit("bulk", 60, now) is None
        admission.release("bulk", 60, now)
    assert admission.admit("quiet", 1, now) is None
    admission.release("quiet", 1, now)
    refused = admission.admit("bulk", 60, now)
    assert refused is not None and refused.limit == "work_share"
    assert "'bulk'" in refused.reason and "180 of 99 cost units a second" in refused.reason
    # Held until its rate decays to what the quiet one leaves, 99/s, with this call counted at half a
    # window of that: ln((180 + 49.5) / 99) s at most; the quiet one gets in all along.
    assert refused.retry_after_s == pytest.approx(math.log(229.5 / 99))
    assert admission.admit("quiet", 1, now + 0.5) is None
    admission.release("quiet", 1, now + 0.5)
    assert admission.admit("bulk", 60, now + 0.5) is not None  # the server still past 100/s
    # Sooner, when the server's own rate falls below what it sustains (181 e^-1 < 100): work-conserving.
    assert admission.admit("bulk", 60, now + 1.0) is None
    admission.release("bulk", 60, now + 1.0)
    # The quiet tenant away a whole window, nothing is shared: the server's rate no longer matters.
    for step in range(5):
        assert admission.admit("bulk", 60, now + 3.0 + step * 0.01) is None
        admission.release("bulk", 60, now + 3.0 + step * 0.01)


def test_a_call_dearer_than_the_share_gets_in_once_its_tenant_has_been_quiet() -> None:
    admission = Admission(_policy(max_cost_in_flight=0, server_cost_per_s=100, share_window_s=1))
    admission.admit("other", 150, now=0.0)  # the server past what it sustains
    admission.admit("quiet", 1, now=0.0)
    # Left 100 - 33 - 1 a second (the one past an equal third counted at a third): 500 counts as 33.
    assert admission.admit("bulk", 500, now=0.0) is None
    refused = admission.admit("bulk", 500, now=0.1)
    assert refused is not None and refused.limit == "work_share"


def test_a_tenant_that_asks_little_leaves_the_rest_to_the_others() -> None:
    admission = Admission(_policy(max_cost_in_flight=0, server_cost_per_s=100, share_window_s=1))
    assert admission.admit("light", 10, now=0.0) is None
    for _ in range(2):  # the server under what it sustains: nothing is held back
        assert admission.admit("bulk", 60, now=0.0) is None
    refused = admission.admit("bulk", 60, now=0.0)  # past it: 100 less light's 10, not an equal 50
    assert refused is not None and "120 of 90 cost units a second" in refused.reason
    assert admission.admit("light", 10, now=0.0) is None


def test_a_rate_past_what_the_server_sustains_holds_no_one_back_until_its_calls_fill_it() -> None:
    """Cheap calls one at a time count more units than the work they do: the rate alone proves nothing."""
    admission = Admission(_policy(max_cost_in_flight=16, server_cost_per_s=100, share_window_s=1))
    assert admission.admit("quiet", 1, now=0.0) is None
    admission.release("quiet", 1, now=0.0)
    for step in range(300):  # 300 units in a second, one call in flight at a time
        assert admission.admit("fast", 1, now=step / 300) is None
        admission.release("fast", 1, now=step / 300)
    assert admission.admit("fast", 1, now=0.998) is None  # still in flight: the next one is a second stream
    for _ in range(2):  # two dear calls side by side fill the cost in flight (with fast's and quiet's)
        assert admission.admit("bulk", 7, now=0.999) is None
    admission.admit("quiet", 1, now=0.999)
    refused = admission.admit("fast", 1, now=0.999)
    assert refused is not None and refused.limit == "work_share"


def test_a_tenant_keeps_one_stream_of_ordinary_calls_past_its_work_share() -> None:
    """A user's agent asking one short thing at a time beside a flood (BENCHMARKS.md, the neighbour
    bench: the quiet tenant at c1 had been refused 48 of 1,320 recalls once recalls got cheaper and its
    stream faster than half the server): its next ordinary call always gets in; a second one beside it,
    or a dear one, is held to the share as before."""
    admission = Admission(_policy(max_cost_in_flight=16, server_cost_per_s=100, share_window_s=1))
    for step in range(100):  # the flood: dear calls past what the server sustains, two in flight
        now = step / 100
        for _ in range(2):
            admission.admit("flood", 8, now=now)
        for step_of_quiet in range(2):  # 200 ordinary calls a second, one at a time: past any share
            assert admission.admit("quiet", 1.5, now=now + step_of_quiet / 200) is None
            admission.release("quiet", 1.5, now=now + step_of_quiet / 200)
        admission.release("flood", 8, now=now)
        admission.release("flood", 8, now=now)
    assert admission.admit("quiet", 1.5, now=1.0) is None
    second = admission.admit("quiet", 1.5, now=1.0)  # beside the first
    assert second is not None and second.limit in ("share", "work_share")
    admission.release("quiet", 1.5, now=1.0)
    dear = admission.admit("quiet", 2.5, now=1.0)
    assert dear is not None and dear.limit == "work_share"


def test_refusals_count_in_the_rate_of_a_client_that_does_not_wait() -> None:
    admission = Admission(_policy(max_cost_in_flight=0, server_cost_per_s=100, share_window_s=1))
    admission.admit("other", 150, now=0.0)
    assert admission.admit("eager", 40, now=0.0) is None
    waits = []
    for _ in range(500):  # resent at once, 500 times
        refused = admission.admit("eager", 40, now=0.0)
        assert refused is not None
        waits.append(refused.retry_after_s)
    assert waits[-1] > waits[0]  # 500 refusals: 10 units more to decay
    assert waits[-1] == pytest.approx(math.log((40 + 10 + 25) / 50), rel=1e-3)


def test_work_share_needs_a_window_to_average_over() -> None:
    with pytest.raises(InvalidArgument, match="share_window_s"):
        AdmissionPolicy(server_cost_per_s=100, share_window_s=0)


def test_a_dear_call_beside_other_tenants_leaves_a_debt_paid_at_its_share() -> None:
    """The rate forgets a 600-unit batch within a few windows; its work does not end that soon. Beside a
    quiet tenant the part not counted at admission is owed at the share (99/s: (600 - 49.5) / 99 s)."""
    admission = Admission(_policy(max_cost_in_flight=0, server_cost_per_s=100, share_window_s=1))
    assert admission.admit("bulk", 600, now=0.0) is None  # alone: owes nothing
    admission.release("bulk", 600, now=0.0)
    assert admission.admit("bulk", 600, now=10.0) is None
    admission.release("bulk", 600, now=10.0)
    admission.admit("quiet", 1, now=20.0)
    admission.release("quiet", 1, now=20.0)
    assert admission.admit("bulk", 600, now=20.0) is None  # its first beside another: let in
    admission.release("bulk", 600, now=20.0)
    owed_s = (600 - 99 / 2) / 99
    for later in (3.0, owed_s - 0.01):
        admission.admit("quiet", 1, now=20.0 + later)  # still calling
        admission.release("quiet", 1, now=20.0 + later)
        refused = admission.admit("bulk", 1, now=20.0 + later)  # even a cheap call waits
        assert refused is not None and refused.limit == "work_share"
        assert refused.retry_after_s == pytest.approx(owed_s - later)
    admission.admit("quiet", 1, now=20.0 + owed_s)
    admission.release("quiet", 1, now=20.0 + owed_s)
    assert admission.admit("bulk", 600, now=20.0 + owed_s + 0.01) is None
    # The quiet one away a whole window: the debt no longer holds the tenant back.
    assert admission.admit("bulk", 600, now=20.0 + owed_s + 2.0) is None
