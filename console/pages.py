"""The pages: each reads its bounded inputs (console/forms.py), calls the memory servers through the
session's typed client, and renders a template. Errors become pages in web.signed_in."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from console import charts
from console.backend import Backend
from console.explain import channels_of, enum_name, hits_of, why_not
from console.forms import (
    KINDS,
    MAX_BULK_IDS,
    MAX_IDENTIFIER,
    MAX_REASON,
    STATUSES,
    TIERS,
    FieldError,
    MemoryFilter,
    bounded_text,
    memory_filter,
    memory_id,
    memory_ids,
    recall_form,
    time_field,
)
from console.i18n import translate
from console.sessions import LoginThrottle, Session
from console.web import COOKIE, LOGIN_COOKIE, Pages, first, read_form, timestamp
from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb

__all__ = ["Console", "believed_at"]

LIST_PAGE = 500  # the servers' largest List page, for scans
DERIVED_SCAN = 1000  # memories of a subject searched for those derived from one memory
ERASURES_KEPT = 20  # per tenant, shown on the Erasure page
TENANTS_KEPT = 1000
PROBE_TOP_K = 100  # the servers' limits.max_top_k
MAX_IDS_TEXT = MAX_BULK_IDS * 40  # the ids of one erasure, as typed or pasted


@dataclass(frozen=True, slots=True)
class ErasureRecord:
    erasure_id: str
    scope: str  # the subject's name, or how many memories
    response: pb.EraseResponse
    left: int  # what could still be read afterwards (none, unless the erasure was cut short)
    of_subject: bool


class Console:
    def __init__(self, pages: Pages, backend: Backend, throttle: LoginThrottle) -> None:
        self.pages = pages
        self.backend = backend
        self.throttle = throttle
        self.scan_limit = backend.settings.scan_limit
        self._erasures: OrderedDict[str, deque[ErasureRecord]] = OrderedDict()

    def _client(self, session: Session) -> HindsightClient:
        if session.client is None:
            session.client = self.backend.client(session.api_key)
        return session.client

    def _t(self, request: Request, key: str, **values: object) -> str:
        return translate(self.pages.language(request), key, **values)

    # ------------------------------------------------------------------------------------------ login

    async def login_form(self, request: Request) -> Response:
        if self.pages.session(request) is not None:
            return RedirectResponse("/memories", status_code=303)
        return self.pages.login_page(request)

    async def login(self, request: Request) -> Response:
        address = request.client.host if request.client else ""
        try:
            form = first(await read_form(request))
            given = form.get("login_csrf", "")
            expected = request.cookies.get(LOGIN_COOKIE, "")
            if not given or not secrets.compare_digest(given.encode(), expected.encode()):
                return self.pages.error_page(request, None, 403, self._t(request, "csrf.refused"))
            tenant = bounded_text(form, "tenant", MAX_IDENTIFIER, required=True)
            api_key = bounded_text(form, "api_key", 512, required=True)
        except FieldError as error:
            message = self._t(request, "error.field", field=error.field, message=error.message)
            return self.pages.login_page(request, 400, message)
        if not self.throttle.allowed(address):
            return self.pages.login_page(request, 429, self._t(request, "login.throttled"), tenant)
        client = self.backend.client(api_key)
        try:
            await client.list(tenant, page_size=1)  # proves the key: it must be this tenant's, with read
        except grpc.aio.AioRpcError as error:
            details = error.details() or error.code().name
            if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return self.pages.login_page(
                    request, 503, self._t(request, "login.unreachable", reason=details), tenant
                )
            self.throttle.failed(address)
            return self.pages.login_page(
                request, 401, self._t(request, "login.refused", reason=details), tenant
            )
        session = self.pages.sessions.create(tenant, api_key)
        session.client = client
        response = RedirectResponse("/memories", status_code=303)
        self.pages.set_cookie(response, request, COOKIE, session.session_id)
        response.delete_cookie(LOGIN_COOKIE, path="/")
        return response

    async def logout(self, request: Request, session: Session) -> Response:
        self.pages.sessions.end(session.session_id)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # --------------------------------------------------------------------------------------- memories

    async def memories(self, request: Request, session: Session) -> Response:
        params = dict(request.query_params)
        if "subject" not in params:
            return await self._subjects(request, session)
        wanted = memory_filter(params)
        memories, next_token, scanned = await self._page(self._client(session), session.tenant, wanted)
        return self.pages.render(
            request,
            "memories.html",
            session,
            filter=wanted,
            memories=memories,
            next_token=next_token,
            scanned=scanned,
            tiers=TIERS,
            kinds=KINDS,
            statuses=STATUSES,
            enum=_enum_names,
        )

    async def _page(
        self, client: HindsightClient, tenant: str, wanted: MemoryFilter
    ) -> tuple[list[pb.Memory], str, int]:
        """One page of the subject's memories under the filter: the server's page when the server does
        all the filtering; otherwise whole server pages, read until a page's worth matched or the scan
        limit (so a page costs at most scan_limit memories read)."""
        statuses = [wanted.status] if wanted.status else list(STATUSES)
        filters: dict[str, Any] = {
            "subject": wanted.subject,
            "tiers": [wanted.tier] if wanted.tier else [],
            "kinds": [wanted.kind] if wanted.kind else [],
            "statuses": statuses,
            "page_size": wanted.page_size,
        }
        if not wanted.filters_in_console:
            page = await client.list(tenant, page_token=wanted.page_token, **filters)
            return list(page.memories), page.next_page_token, len(page.memories)
        kept: list[pb.Memory] = []
        token, scanned = wanted.page_token, 0
        while True:
            page = await client.list(tenant, page_token=token, **filters)
            scanned += len(page.memories)
            kept += [
                m for m in page.memories if wanted.matches(m.content, m.created_at.ToDatetime(tzinfo=UTC))
            ]
            token = page.next_page_token
            if not token or len(kept) >= wanted.page_size or scanned >= self.scan_limit:
                return kept, token, scanned

    async def _subjects(self, request: Request, session: Session) -> Response:
        client = self._client(session)
        counts: Counter[str] = Counter()
        token, scanned = "", 0
        while scanned < self.scan_limit:
            page = await client.list(
                session.tenant, page_size=LIST_PAGE, page_token=token, statuses=list(STATUSES)
            )
            scanned += len(page.memories)
            counts.update(memory.subject for memory in page.memories)
            token = page.next_page_token
            if not token:
                break
        return self.pages.render(
            request,
            "subjects.html",
            session,
            subjects=counts.most_common(500),
            scanned=scanned,
            cut=bool(token),
        )

    async def memory(self, request: Request, session: Session) -> Response:
        wanted = memory_id(request.path_params["memory_id"])
        as_of_text = bounded_text(dict(request.query_params), "as_of", 40)
        client = self._client(session)
        memory = await client.get(session.tenant, wanted)
        history, derived = await asyncio.gather(
            client.history(session.tenant, wanted), self._derived_into(client, session.tenant, memory)
        )
        believed: pb.Memory | None = None
        as_of = None
        if as_of_text:
            as_of = time_field({"as_of": as_of_text}, "as_of")
            believed = believed_at(list(history.versions), as_of)
        return self.pages.render(
            request,
            "memory.html",
            session,
            memory=memory,
            versions=list(history.versions),
            derived=derived,
            derived_scan=DERIVED_SCAN,
            as_of=as_of,
            as_of_text=as_of_text,
            believed=believed,
            enum=_enum_names,
            provenance=_struct_items(memory.provenance),
            entities=_struct_items(memory.entities),
        )

    async def _derived_into(self, client: HindsightClient, tenant: str, memory: pb.Memory) -> list[pb.Memory]:
        """The memories consolidated from this one, among the subject's latest DERIVED_SCAN: no RPC
        looks derived_from up backwards."""
        found: list[pb.Memory] = []
        token, scanned = "", 0
        while scanned < DERIVED_SCAN:
            page = await client.list(
                tenant, subject=memory.subject, statuses=list(STATUSES), page_size=LIST_PAGE, page_token=token
            )
            scanned += len(page.memories)
            found += [m for m in page.memories if memory.id in m.derived_from]
            token = page.next_page_token
            if not token:
                break
        return found

    # ----------------------------------------------------------------------------------------- recall

    async def recall(self, request: Request, session: Session) -> Response:
        params = dict(request.query_params)
        context: dict[str, Any] = {"form": params, "ran": False}
        if params.get("query"):
            asked = recall_form(params)
            client = self._client(session)
            common: dict[str, Any] = {
                "subject": asked.subject,
                "session_id": asked.session_id,
                "profile": asked.profile,
                "token_budget": asked.token_budget,
                "explain": True,
            }
            response = await client.recall(session.tenant, asked.query, top_k=asked.top_k, **common)
            reasons = None
            if asked.expected:
                expected, probe = await asyncio.gather(
                    self._visible(client, session.tenant, asked.expected),
                    client.recall(session.tenant, asked.query, top_k=PROBE_TOP_K, min_score=0.0, **common),
                )
                reasons = why_not(asked.expected, expected, asked.subject, response, probe)
            explanation = response.explanation
            context.update(
                ran=True,
                asked=asked,
                response=response,
                hits=hits_of(response),
                channels=channels_of(response),
                degraded=[enum_name(pb.Channel, "CHANNEL_", c) for c in response.channels_degraded],
                reasons=reasons,
                weights=", ".join(
                    f"{name} {getattr(explanation.weights, name):g}"
                    for name in ("similarity", "recency", "tier_priority", "entity_match")
                ),
                time_range=_range(response.time_range),
            )
        return self.pages.render(request, "recall.html", session, **context)

    @staticmethod
    async def _visible(client: HindsightClient, tenant: str, wanted: str) -> pb.Memory | None:
        try:
            return await client.get(tenant, wanted)
        except grpc.aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                return None
            raise

    # ---------------------------------------------------------------------------------------- pending

    async def pending(self, request: Request, session: Session) -> Response:
        token = bounded_text(dict(request.query_params), "page_token", 2048)
        page = await self._client(session).list(
            session.tenant, statuses=["pending"], page_size=100, page_token=token
        )
        return self.pages.render(
            request,
            "pending.html",
            session,
            memories=list(page.memories),
            next_token=page.next_page_token,
            enum=_enum_names,
        )

    async def decide(self, request: Request, session: Session) -> Response:
        form: dict[str, list[str]] = request.state.form
        one = first(form).get("one", "")
        if one:
            action, _, single = one.partition(":")
            ids = memory_ids([single])
        else:
            action = first(form).get("action", "")
            ids = memory_ids(form.get("ids", []))
        if action not in ("confirm", "reject"):
            raise FieldError("action", "confirm or reject")
        if not ids:
            raise FieldError("ids", self._t(request, "pending.nothing"))
        client = self._client(session)
        decide = client.confirm_pending if action == "confirm" else client.reject_pending
        done = 0
        for wanted in ids:  # one after the other: a bulk decision is at most MAX_BULK_IDS calls
            try:
                await decide(session.tenant, wanted)
                done += 1
            except grpc.aio.AioRpcError as error:
                session.flash(
                    self._t(request, "pending.failed", id=wanted, reason=error.details() or error.code().name)
                )
        confirmed, rejected = (done, 0) if action == "confirm" else (0, done)
        session.flash(self._t(request, "pending.done", count=confirmed, rejected=rejected))
        return RedirectResponse("/pending", status_code=303)

    # ---------------------------------------------------------------------------------------- erasure

    def _erasure_log(self, tenant: str) -> deque[ErasureRecord]:
        log = self._erasures.get(tenant)
        if log is None:
            log = self._erasures[tenant] = deque(maxlen=ERASURES_KEPT)
            while len(self._erasures) > TENANTS_KEPT:
                self._erasures.popitem(last=False)
        self._erasures.move_to_end(tenant)
        return log

    def _erasure_page(
        self,
        request: Request,
        session: Session,
        status_code: int = 200,
        *,
        done: ErasureRecord | None = None,
        error: str = "",
        subject: str = "",
        ids: str = "",
    ) -> Response:
        return self.pages.render(
            request,
            "erasure.html",
            session,
            status_code,
            recent=list(self._erasure_log(session.tenant)),
            done=done,
            error=error,
            subject=subject,
            ids=ids,
        )

    async def erasure_form(self, request: Request, session: Session) -> Response:
        params = dict(request.query_params)
        return self._erasure_page(
            request,
            session,
            subject=bounded_text(params, "subject", MAX_IDENTIFIER),
            ids=" ".join(memory_ids(bounded_text(params, "ids", MAX_IDS_TEXT).replace(",", " ").split())),
        )

    async def erase(self, request: Request, session: Session) -> Response:
        """A subject, or named memories (with their versions and what was derived from them), after the
        typed confirmation: the subject's name, or the number of memories."""
        form = first(request.state.form)
        reason = bounded_text(form, "reason", MAX_REASON) or "hindsight console"
        confirmation = form.get("confirmation", "").strip()
        client = self._client(session)
        if form.get("scope") == "memories":
            text = bounded_text(form, "ids", MAX_IDS_TEXT, required=True)
            ids = memory_ids(text.replace(",", " ").split())
            if confirmation != str(len(ids)):
                message = self._t(request, "erasure.mismatch_count", count=len(ids))
                error = self._t(request, "error.field", field="confirmation", message=message)
                return self._erasure_page(request, session, 400, error=error, ids=" ".join(ids))
            response = await client.erase(session.tenant, memory_ids=ids, reason=reason)
            visible = await asyncio.gather(*(self._visible(client, session.tenant, i) for i in ids))
            left = sum(memory is not None for memory in visible)
            scope = self._t(request, "erasure.scope_memories", count=len(ids))
        else:
            subject = bounded_text(form, "subject", MAX_IDENTIFIER, required=True)
            if confirmation != subject:
                message = self._t(request, "erasure.mismatch", subject=subject)
                error = self._t(request, "error.field", field="confirmation", message=message)
                return self._erasure_page(request, session, 400, error=error, subject=subject)
            response = await client.erase(session.tenant, subject=subject, reason=reason)
            remaining = await client.list(
                session.tenant, subject=subject, statuses=list(STATUSES), page_size=1
            )
            left, scope = len(remaining.memories), subject
        record = ErasureRecord(response.erasure_id, scope, response, left, form.get("scope") != "memories")
        self._erasure_log(session.tenant).appendleft(record)
        return self._erasure_page(request, session, done=record)

    # ------------------------------------------------------------------------------------- operations

    async def operations(self, request: Request, session: Session) -> Response:
        servers, (metric_lines, metrics_error) = await asyncio.gather(
            self.backend.servers(session.api_key), self.backend.metrics()
        )
        views = []
        for server in servers:
            recall = server.figures.get("recall", {})
            samples = list(self.backend.samples.get(server.target, ()))
            target = recall.get("target_p99_ms")
            over_time = charts.line_chart(
                [
                    ("p50", "p50", [s.p50_ms for s in samples]),
                    ("p95", "p95", [s.p95_ms for s in samples]),
                    ("p99", "p99", [s.p99_ms for s in samples]),
                ],
                target,
            )
            stages = [
                (name.removeprefix("recall."), float(figures.get("p99_ms") or 0.0))
                for name, figures in sorted(recall.get("stages", {}).items())
                if name.startswith("recall.") and figures.get("count")
            ]
            views.append(
                {
                    "server": server,
                    "recall": recall,
                    "over_time": over_time,
                    "stages": charts.bar_chart(stages, target) if stages else None,
                    "samples": len(samples),
                }
            )
        return self.pages.render(
            request,
            "ops.html",
            session,
            views=views,
            metric_lines=metric_lines,
            metrics_error=metrics_error,
            metrics_url=self.backend.settings.metrics_url,
        )


# ----------------------------------------------------------------------------------------- helpers


def believed_at(versions: list[pb.Memory], moment: datetime | None) -> pb.Memory | None:
    """The version of a chain (oldest first) that was the latest recorded at `moment`."""
    if moment is None:
        return None
    recorded = [v for v in versions if (at := timestamp(v.created_at)) is not None and at <= moment]
    return recorded[-1] if recorded else None


def _enum_names(kind: str, value: int) -> str:
    enum, prefix = {
        "tier": (pb.Tier, "TIER_"),
        "kind": (pb.Kind, "KIND_"),
        "status": (pb.Status, "STATUS_"),
        "visibility": (pb.Visibility, "VISIBILITY_"),
        "embedding": (pb.EmbeddingState, "EMBEDDING_STATE_"),
    }[kind]
    return enum_name(enum, prefix, value)


def _struct_items(struct: Any) -> list[tuple[str, str]]:
    values = json_format.MessageToDict(struct) if struct.ListFields() else {}
    return [
        (key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for key, value in sorted(values.items())
    ]


def _range(value: pb.TimeRange) -> str:
    start, end = timestamp(value.start), timestamp(value.end)
    if start is None and end is None:
        return ""
    return f"{start.isoformat() if start else '…'} – {end.isoformat() if end else '…'}"
