"""Admission control: a fair share of one server for each tenant, by the work its calls cause.

Each call has a cost in units (one unit: about one small recall's work on a server; `call_cost`), from
what the request asks for: items, bytes, results. A tenant is admitted while
- its cost bucket holds the call's cost (`cost_per_s` on average, bursts up to `burst`; a call dearer
  than the whole burst waits for a full bucket and then takes it all);
- it has fewer than `max_calls_per_tenant` calls in flight on this server, and the server has room:
  the cost in flight with this call stays within `max_cost_in_flight` (about what its cores run without
  queueing), or, when it would not, this tenant's own cost in flight with this call stays within an
  equal share among the tenants with calls in flight. A tenant with nothing in flight always gets in:
  a quiet tenant's call always finds room, and a busy one is held to its share, weighed by what its
  calls cost, while others are calling;
- and, while other tenants are calling, the cost in flight has reached its limit within the share window
  and the server's recent rate of admitted cost is past `server_cost_per_s` (what it sustains), this
  tenant's own recent rate is within what the others leave of it, each counted at most at an equal share
  (except for an ordinary call, at most `ORDINARY_COST`, of a tenant with nothing in flight: every
  tenant keeps one stream of ordinary calls however busy the others make the server, and one stream's
  work ends with each answer, where a dear call's goes on after it);
  a call dearer than half a window of that share leaves the rest of its cost as a debt, paid at the share
  before the tenant's next call (so a stream of huge batches gets its share, not one each few windows).
  The calls in flight bound a moment; this bounds the work over time, which the in-flight rules cannot:
  one stream of megabyte batches has one call in flight, and their embeddings go on after each answer.
Otherwise the call is refused at once with a retry delay (RESOURCE_EXHAUSTED + RetryInfo): work is shed
before it queues. Pure: the caller passes the time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from math import exp, log

from hindsight_server.domain.errors import InvalidArgument

__all__ = [
    "LEAST_COST",
    "ORDINARY_COST",
    "REFUSAL_COST",
    "Admission",
    "AdmissionPolicy",
    "CallShape",
    "Refusal",
    "call_cost",
]

_KIB = 1024
# A call in flight ends within tens of milliseconds: a retry that soon finds room, and the client's
# backoff grows the wait if not.
BUSY_RETRY_S = 0.05
LEAST_COST = 1.0  # of any call: a tenant refused at this cost is refused whatever it asks
# At most this, a call is ordinary: a recall of a short query and a few results (1.0-1.5), a short write.
# A tenant's one stream of them is never held to a work share (a user's agent asking one thing at a
# time); the calls whose work a share must bound cost more: a 4 KB query ~12, a large batch hundreds.
ORDINARY_COST = 2.0
# A refusal's own work (reading the call, answering it: ~0.4 ms of a server), charged to the tenant's
# rate: a client that resends at once instead of waiting the retry delay keeps itself refused longer.
REFUSAL_COST = 0.02


@dataclass(frozen=True, slots=True)
class CallShape:
    """What a request asks of the server, as far as its cost goes."""

    method: str  # the RPC's name: "Recall", "WriteBatch", ...
    items: int = 1  # memories written or imported, results asked for (top_k, page size)
    request_bytes: int = 0
    rerank_pairs: int = 0  # (query, passage) pairs a recall's cross-encoder will score
    rerank_on_gpu: bool = False  # the tier runs the cross-encoder on a GPU


# Units per call, then per item and per KiB of request. Measured on these servers' CPU profiles: a
# recall of top 10 is ~1 unit (~15-20 ms of the stack's CPU); writing one memory (analysis, peers,
# conflict rules, insert) about the same; text costs in proportion to its size, because the encoders'
# work grows with it: a recall's 4 KB query is ~190 ms of Triton CPU (both models; a short one ~8 ms),
# a KiB of written text ~6 ms of analysis and embedding (BENCHMARKS.md, "what a call costs").
_BASE = {
    "Recall": 1.0,
    "Write": 1.0,
    "WriteBatch": 1.0,
    "AppendTurn": 2.0,  # a working memory, remember-or-not, the summary: two writes' work
    "Import": 1.0,
    "Export": 20.0,  # a stream of pages
    "Erase": 20.0,
    "History": 1.0,
    "EndSession": 2.0,
}
# An audit page reads an entry and its id arrays a result, like a List page's memories.
_PER_ITEM = {"Recall": 0.02, "List": 0.005, "AuditRecalls": 0.005, "WriteBatch": 0.5, "Import": 0.5}
_PER_KIB = {
    "Recall": 2.5,
    "Write": 0.35,
    "WriteBatch": 0.35,
    "Import": 0.35,
    "AppendTurn": 0.35,
    "Update": 0.35,
}
_PER_KIB_OTHER = 0.05  # reading the request, for calls whose text is not analysed or embedded
# A pair the cross-encoder scores on CPU: ~14 ms of the tier's CPU (415 ms for the default 30 on cores with
# int8 dot products; BENCHMARKS.md, "The cross-encoder's depth and weight"), so a reranked recall is some
# 25 small ones. On a GPU what remains on the CPU is tokenizing the pair: an estimate, not measured here.
_PER_RERANK_PAIR_CPU = 0.8
_PER_RERANK_PAIR_GPU = 0.02


def call_cost(shape: CallShape, max_items: int = 1_000) -> float:
    """The call's cost in units (at least 1). Items past `max_items` (the batch limit) are not counted:
    validation refuses such a request before it does that work, and must be the one to say why."""
    cost = _BASE.get(shape.method, 1.0)
    cost += _PER_ITEM.get(shape.method, 0.0) * min(max(shape.items, 0), max_items)
    cost += _PER_KIB.get(shape.method, _PER_KIB_OTHER) * shape.request_bytes / _KIB
    per_pair = _PER_RERANK_PAIR_GPU if shape.rerank_on_gpu else _PER_RERANK_PAIR_CPU
    cost += max(shape.rerank_pairs, 0) * per_pair
    return max(cost, LEAST_COST)


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    cost_per_s: float = 1_000.0  # per tenant per server; 0: no cost limit
    burst: float = 2_000.0
    max_calls_per_tenant: int = 16  # in flight per tenant per server; 0: no limit
    # Cost units in flight per server before each tenant is held to an equal share of them; 0: no limit.
    max_cost_in_flight: float = 16.0
    # A tenant that called this recently shares a busy server even between its calls: a quiet tenant at
    # one call at a time is not crowded out in the moment between two of them.
    share_window_s: float = 1.0
    # Cost units a second the server sustains; past it, each tenant's recent rate is held to an equal
    # share. Rates are averaged over `share_window_s` (exponentially). 0: no limit.
    server_cost_per_s: float = 0.0

    def __post_init__(self) -> None:
        limits = (
            self.cost_per_s,
            self.max_calls_per_tenant,
            self.max_cost_in_flight,
            self.share_window_s,
            self.server_cost_per_s,
        )
        if min(limits) < 0:
            raise InvalidArgument("admission", "limits must not be negative")
        if self.cost_per_s and self.burst < 1:
            raise InvalidArgument("admission.burst", "must be at least 1")
        if self.server_cost_per_s and not self.share_window_s:
            raise InvalidArgument("admission.share_window_s", "must be positive to average rates over")


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # for the caller: what limit, in words
    retry_after_s: float
    limit: str  # which limit: "rate", "tenant_calls", "share" (a metric attribute)


@dataclass
class _Tenant:
    tokens: float
    at: float  # monotonic seconds of its last call or release (and of the bucket's last refill)
    in_flight: int = 0
    cost_in_flight: float = 0.0
    recent_cost: float = 0.0  # admitted cost, decayed over the share window as of `at`
    # Until when its share is spent by the part of dear calls the rate did not count at admission (see
    # `_charge_excess`); -inf: no debt.
    debt_until: float = float("-inf")


@dataclass
class Admission:
    """One server's admission state; `admit` then, for each admitted call, `release` when it ends."""

    policy: AdmissionPolicy
    # Past this many tenants, idle ones with full buckets are forgotten (a new one starts full), so
    # callers naming ever new tenants cannot grow the map.
    max_tenants: int = 10_000
    # Least recently active first: the tenants sharing the server now are counted from the end.
    _tenants: OrderedDict[str, _Tenant] = field(default_factory=OrderedDict)
    _busy: set[str] = field(default_factory=set)  # with calls in flight, however long ago they began
    _in_flight: int = 0
    _cost_in_flight: float = 0.0
    _recent_cost: float = 0.0  # the server's, as each tenant's
    _recent_at: float = 0.0
    _full_at: float = float("-inf")  # when a call last found the cost in flight at its limit

    def admit(self, tenant: str, cost: float, now: float) -> Refusal | None:
        """None: admitted (release it later with the same cost); else why not and when to retry."""
        refused, allowed = self._refusal(tenant, cost, now)
        if refused is not None:
            self.charge_refusal(tenant)
            return refused
        state = self._tenants[tenant]
        weight = self._weight(cost)
        if self.policy.cost_per_s:
            state.tokens -= min(cost, self.policy.burst)
        state.recent_cost += cost
        self._recent_cost += cost
        self._charge_excess(state, cost, allowed, now)
        state.in_flight += 1
        state.cost_in_flight += weight
        self._busy.add(tenant)
        self._in_flight += 1
        self._cost_in_flight += weight
        return None

    def charge_refusal(self, tenant: str) -> None:
        """Counts a refusal's work in the tenant's and the server's recent rates."""
        state = self._tenants.get(tenant)
        if state is not None:
            state.recent_cost += REFUSAL_COST
            self._recent_cost += REFUSAL_COST

    def refusal(self, tenant: str, cost: float, now: float) -> Refusal | None:
        """Why a call of this cost would be refused now (None: it would be admitted); takes nothing.
        At LEAST_COST: whether the tenant is refused whatever it asks, before reading what it asks."""
        return self._refusal(tenant, cost, now)[0]

    def _refusal(self, tenant: str, cost: float, now: float) -> tuple[Refusal | None, float | None]:
        """The refusal, and for an admitted call the tenant's work share (`_work_share`; None: no other
        tenant, or no limit), which admission charges its debt against without counting it again."""
        policy = self.policy
        state = self._touch(tenant, now)
        if policy.max_calls_per_tenant and state.in_flight >= policy.max_calls_per_tenant:
            return Refusal(
                f"tenant {tenant!r} has {state.in_flight} calls in flight on this server, its limit",
                BUSY_RETRY_S,
                "tenant_calls",
            ), None
        # A tenant with nothing in flight always gets in (a quiet tenant, or one dear call alone).
        weight = self._weight(cost)
        full = policy.max_cost_in_flight and self._cost_in_flight + weight > policy.max_cost_in_flight
        if full:
            self._full_at = now
        if full and state.in_flight and state.cost_in_flight + weight > self.share(tenant, now):
            return Refusal(
                f"this server is busy and tenant {tenant!r} holds its share of it "
                f"({state.in_flight} calls, {state.cost_in_flight:.1f} cost units in flight)",
                BUSY_RETRY_S,
                "share",
            ), None
        if policy.cost_per_s:
            needed = min(cost, policy.burst)
            if state.tokens < needed:
                wait_s = (needed - state.tokens) / policy.cost_per_s
                return Refusal(
                    f"tenant {tenant!r} is over its rate of {policy.cost_per_s:g} cost units a second "
                    f"(this call costs {cost:.1f})",
                    wait_s,
                    "rate",
                ), None
        allowed = self._work_share(tenant, now) if policy.server_cost_per_s else None
        # Alone, a tenant may load the server past what it sustains: only its own calls wait for it. And
        # a rate alone is no proof of a busy server (cheap calls cost less than their units say): the
        # cost in flight must have filled it within the window too.
        one_ordinary_stream = not state.in_flight and cost <= ORDINARY_COST
        if (
            allowed is not None
            and not one_ordinary_stream
            and self._busy_now(now)
            and self._server_rate(now) > policy.server_cost_per_s
        ):
            window = policy.share_window_s
            # A call dearer than half a window's share counts as that much here, or it would never get
            # in beside another tenant; its whole cost still counts in the rate after it.
            rate = (state.recent_cost + min(cost, allowed * window / 2)) / window
            if rate > allowed:
                return Refusal(
                    f"this server is past the work it sustains and tenant {tenant!r} has had its share "
                    f"of it ({state.recent_cost / window:.0f} of {allowed:.0f} cost units a second)",
                    max(BUSY_RETRY_S, window * log(rate / allowed)),  # until its rate decays to the share
                    "work_share",
                ), None
        if allowed is not None and state.debt_until > now:
            return Refusal(
                f"tenant {tenant!r} has had its share of this server for the next "
                f"{state.debt_until - now:.1f} s (its last calls were dear), while other tenants call",
                state.debt_until - now,
                "work_share",
            ), None
        return None, allowed

    def _busy_now(self, now: float) -> bool:
        """Whether the cost in flight filled the server within the share window (always, unlimited)."""
        return not self.policy.max_cost_in_flight or now - self._full_at <= self.policy.share_window_s

    def _charge_excess(self, state: _Tenant, cost: float, allowed: float | None, now: float) -> None:
        """A call dearer than half a window's share is admitted counting as that much, and the rate,
        which forgets within a few windows, soon lets the next one in, though its work (an hour-long
        batch's embeddings) goes on long after: beside other tenants, the rest of its cost is a debt
        paid at the tenant's share (`allowed`, as its admission found it), before which it is refused.
        Owed only while the server is past what it sustains; alone, a tenant owes nothing."""
        if allowed is None or allowed <= 0:
            state.debt_until = float("-inf")
            return
        policy = self.policy
        if not self._busy_now(now) or self._server_rate(now) <= policy.server_cost_per_s:
            return  # work-conserving: a server under what it sustains holds no one back
        excess = cost - allowed * policy.share_window_s / 2
        if excess > 0:
            state.debt_until = max(state.debt_until, now) + excess / allowed

    def _work_share(self, tenant: str, now: float) -> float | None:
        """The cost a second `tenant` may use of what the server sustains: all of it less what the other
        tenants calling within the share window use, each counted at most at an equal share (so a tenant
        that asks for little leaves the rest to those that ask for more). None: no other tenant."""
        window = self.policy.share_window_s
        since = now - window
        others = {name for name in self._busy if name != tenant}
        for name in reversed(self._tenants):
            if self._tenants[name].at < since:
                break
            if name != tenant:
                others.add(name)
        if not others:
            return None
        capacity = self.policy.server_cost_per_s
        equal = capacity / (len(others) + 1)
        used = 0.0
        for name in others:
            other = self._tenants[name]
            rate = other.recent_cost * exp(min(other.at - now, 0.0) / window) / window
            used += min(rate, equal)
        return capacity - used

    def _server_rate(self, now: float) -> float:
        """The server's admitted cost a second, averaged over the share window."""
        window = self.policy.share_window_s
        if now > self._recent_at:
            self._recent_cost *= exp((self._recent_at - now) / window)
            self._recent_at = now
        return self._recent_cost / window

    def release(self, tenant: str, cost: float, now: float) -> None:
        state = self._tenants.get(tenant)
        if state is None or state.in_flight <= 0:
            return
        weight = self._weight(cost)
        state.in_flight -= 1
        self._in_flight -= 1
        state.cost_in_flight = max(state.cost_in_flight - weight, 0.0) if state.in_flight else 0.0
        self._cost_in_flight = max(self._cost_in_flight - weight, 0.0) if self._in_flight else 0.0
        if not state.in_flight:
            self._busy.discard(tenant)
        self._touch(tenant, now)

    def share(self, tenant: str, now: float) -> float:
        """A busy server's equal share of cost in flight for `tenant`, among the tenants with calls in
        flight or active within the share window, this one counted."""
        since = now - self.policy.share_window_s
        recent = 0
        for name in reversed(self._tenants):
            if self._tenants[name].at < since:
                break
            recent += name not in self._busy and name != tenant
        sharing = len(self._busy) + recent + (tenant not in self._busy)
        return self.policy.max_cost_in_flight / sharing

    def _weight(self, cost: float) -> float:
        """What a call in flight counts against the server's cost in flight: its cost, at most half of
        that budget, so a lone tenant can still run two bulk calls side by side (a load), and beside
        other tenants one (its share)."""
        limit = self.policy.max_cost_in_flight
        return min(cost, limit / 2) if limit else cost

    def in_flight(self, tenant: str | None = None) -> int:
        if tenant is None:
            return self._in_flight
        state = self._tenants.get(tenant)
        return 0 if state is None else state.in_flight

    def _touch(self, tenant: str, now: float) -> _Tenant:
        """The tenant's state, its bucket refilled to `now`."""
        state = self._tenants.get(tenant)
        if state is None:
            if len(self._tenants) >= self.max_tenants:
                self._forget_idle(now)
            state = self._tenants[tenant] = _Tenant(self.policy.burst, now)
        else:
            elapsed = max(now - state.at, 0.0)
            if self.policy.cost_per_s:
                state.tokens = min(self.policy.burst, state.tokens + elapsed * self.policy.cost_per_s)
            if self.policy.share_window_s:
                state.recent_cost *= exp(-elapsed / self.policy.share_window_s)
        state.at = max(state.at, now)
        self._tenants.move_to_end(tenant)
        return state

    def _forget_idle(self, now: float) -> None:
        rate, burst = self.policy.cost_per_s, self.policy.burst
        idle = [
            name
            for name, state in self._tenants.items()
            if not state.in_flight and (not rate or state.tokens + (now - state.at) * rate >= burst)
        ]
        for name in idle:
            del self._tenants[name]
