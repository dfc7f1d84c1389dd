"""locust users for hindsight: an agent backend on the gRPC API and agents on the MCP gateway.

    locust -f loadtests/locustfile.py --headless -u 16 -r 16 -t 60s --csv out \\
        --grpc-target 127.0.0.1:50051 --mcp-url http://127.0.0.1:8765/mcp --corpus-memories 10000 \\
        MemoryUser McpUser

(`python -m loadtests.run` starts a cluster, loads the corpus and runs this for you.)

- `MemoryUser` (gRPC, the sync stub on gevent): Recall about the recall benchmark's corpus
  (`hindsight bench recall --memories N` loads it; the same realistic queries: zh / en / mixed, with
  subjects, sessions, time expressions, filters and entities), Write of single memories and AppendTurn
  session turns (zh and en, some with remember cues). Writes and turns go to tenants of their own
  (`load-<run>-...`), so the measured corpus stays the same from run to run.
- `McpUser` (streamable HTTP, plain JSON-RPC: the gateway is stateless and answers JSON, so a call is one
  POST): tools `memory_recall`, `memory_summarize`, `memory_write` in the gateway's tenant.

Every call is reported to locust's statistics under its method's name ("Recall", "mcp memory_recall",
...) with its latency; a gRPC error or an MCP tool error is a failure. `--raw-out FILE` also writes each
call's exact latency (locust rounds its own percentiles to 1-100 ms buckets) for `loadtests.run`.
"""

# grpc's gevent integration must be on before any channel exists: the sync stub then yields to other
# users while it waits (grpc.aio cannot run under gevent). locust has already monkey-patched by now.
import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()

import itertools  # noqa: E402 (after the gevent set-up, on purpose)
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections import defaultdict  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from functools import cache  # noqa: E402
from typing import Any  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import struct_pb2  # noqa: E402
from google.protobuf.message import Message  # noqa: E402
from locust import HttpUser, User, constant_pacing, events, task  # noqa: E402
from locust.argument_parser import LocustArgumentParser  # noqa: E402
from locust.env import Environment  # noqa: E402

from hindsight.client import kind_value, memory_input, role_value, tier_value  # noqa: E402
from hindsight.v1 import memory_pb2 as pb  # noqa: E402
from hindsight.v1 import memory_pb2_grpc as pb_grpc  # noqa: E402
from hindsight_server.bench.corpus import RecallCorpus, recall_corpus, recall_query  # noqa: E402

RUN = uuid.uuid4().hex[:8]  # this run's write and turn tenants
WRITE_TENANTS = 20
_TURNS_PER_SESSION = 12
# Turns an agent forwards: preferences with remember cues, one-off parameters, chit-chat (zh and en).
TURNS = (
    "以后都给我订靠窗的位置",
    "记住，我每次出差都住在公司附近的酒店",
    "帮我订明天下午三点A座的会议室，10个人",
    "改成周五吧",
    "好的，谢谢",
    "我总是喝无糖的拿铁",
    "From now on, send me reports as CSV",
    "Book a table for four at 7 pm on Friday",
    "Actually make it six people",
    "I always prefer aisle seats on long flights",
    "thanks, that's all",
    "remember that my manager is Dana",
)
_RECALL_TIMEOUT_S = 10.0
_WRITE_TIMEOUT_S = 10.0
_raw: dict[str, list[float]] = defaultdict(list)  # "type name" -> latencies (ms) of successful calls
_failures: dict[str, int] = defaultdict(int)
# Recalls answered with a channel missing (the inference tier away, say): a success to locust, but cheaper
# than a whole recall, so a run with many of them measures another system (a crashed tier once doubled
# the mix's throughput).
_degraded: dict[str, int] = defaultdict(int)


@events.init_command_line_parser.add_listener
def _arguments(parser: LocustArgumentParser) -> None:
    group = parser.add_argument_group("hindsight")
    group.add_argument("--grpc-target", default="127.0.0.1:50051", help="HOST:PORT of the gRPC gateway")
    group.add_argument("--mcp-url", default="http://127.0.0.1:8765/mcp", help="the MCP gateway's URL")
    group.add_argument("--mcp-token", default="", help="bearer token for the MCP gateway, if it wants one")
    group.add_argument(
        "--corpus-memories", type=int, default=10_000, help="recall queries are about this corpus"
    )
    group.add_argument("--corpus-tenants", type=int, default=100)
    group.add_argument("--pace", type=float, default=0.0, help="seconds per task and user; 0: no wait")
    group.add_argument("--raw-out", default="", help="write exact per-call latencies (JSON) here")


@events.init.add_listener
def _configure(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is not None:
        McpUser.host = options.mcp_url.rstrip("/")


@events.request.add_listener
def _record(request_type: str, name: str, response_time: float, exception: Any, **_: Any) -> None:
    key = f"{request_type} {name}"
    if exception is None:
        _raw[key].append(response_time)
    else:
        _failures[key] += 1


@events.quitting.add_listener
def _write_raw(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is not None and options.raw_out:
        with open(options.raw_out, "w") as handle:
            json.dump({"latencies_ms": _raw, "failures": _failures, "degraded": _degraded}, handle)


@cache
def _corpus(memories: int, tenants: int) -> RecallCorpus:
    return recall_corpus(memories, tenants=tenants)  # built once per process, shared by every user


def _options(user: User) -> Any:
    options = user.environment.parsed_options
    assert options is not None, "run through locust's command line"
    return options


def _pace(user: User) -> float:
    pace: float = _options(user).pace
    return constant_pacing(pace)(user) if pace > 0 else 0.0


class MemoryUser(User):
    """An agent backend on the gRPC API, through the gateway, with its own connection."""

    weight = 4
    wait_time = _pace
    _ids = itertools.count()

    def on_start(self) -> None:
        options = _options(self)
        self.number = next(self._ids)
        self.rng = random.Random(f"load:{RUN}:{self.number}")
        self.corpus = _corpus(options.corpus_memories, options.corpus_tenants)
        # One connection per user, like separate agent processes; gRPC's own retries are off so every
        # failure shows in the statistics.
        self.channel = grpc.insecure_channel(
            options.grpc_target,
            options=[("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0)],
        )
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self.session = ""
        self.turns = 0

    def on_stop(self) -> None:
        self.channel.close()

    def _call(self, name: str, method: Any, request: Message, timeout_s: float) -> Any:
        started = time.perf_counter()
        response: Message | None = None
        error: grpc.RpcError | None = None
        try:
            response = method(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            error = exc
        self.environment.events.request.fire(
            request_type="grpc",
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=response.ByteSize() if response is not None else 0,
            exception=error,
            context={},
        )
        return response

    @task(14)
    def recall(self) -> None:
        spec = recall_query(self.corpus, self.rng, datetime.now(UTC))
        request = pb.RecallRequest(
            tenant_id=spec.tenant_id,
            query=spec.text,
            subject=spec.subject,
            session_id=spec.session_id,
            tiers=[tier_value(t) for t in spec.tiers],
            kinds=[kind_value(k) for k in spec.kinds],
            top_k=spec.top_k,
        )
        if spec.entities:
            request.entities.CopyFrom(_struct(spec.entities))
        if spec.start is not None:
            request.time_range.start.FromDatetime(spec.start)
        response = self._call("Recall", self.stub.Recall, request, _RECALL_TIMEOUT_S)
        if response is not None and response.channels_degraded:
            _degraded["grpc Recall"] += 1

    @task(3)
    def write(self) -> None:
        memory = self.rng.choice(self.corpus.memories)
        payload = memory_input(
            f"{memory.content} #{self.rng.randrange(10**6)}",  # mostly new, not merged into an old one
            tier=memory.tier,
            kind=memory.kind,
            subject=memory.subject,
            session_id=memory.session_id,
            entities=memory.entities,
            confidence=memory.confidence,
            idempotency_key=uuid.uuid4().hex,
        )
        tenant = f"load-{RUN}-w{self.rng.randrange(WRITE_TENANTS):02d}"
        self._call(
            "Write", self.stub.Write, pb.WriteRequest(tenant_id=tenant, memory=payload), _WRITE_TIMEOUT_S
        )

    @task(3)
    def append_turn(self) -> None:
        if not self.session or self.turns >= _TURNS_PER_SESSION:
            self.session, self.turns = f"s-{self.number}-{uuid.uuid4().hex[:8]}", 0
        self.turns += 1
        request = pb.AppendTurnRequest(
            tenant_id=f"load-{RUN}-turns",
            session_id=self.session,
            subject=f"user-{self.number}",
            role=role_value("user" if self.turns % 2 else "assistant"),
            text=self.rng.choice(TURNS),
            idempotency_key=uuid.uuid4().hex,
        )
        self._call("AppendTurn", self.stub.AppendTurn, request, _WRITE_TIMEOUT_S)


def _struct(values: dict[str, str]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


class McpUser(HttpUser):
    """An agent calling the MCP tools over streamable HTTP (host: --mcp-url)."""

    weight = 1
    wait_time = _pace
    _ids = itertools.count(1)

    def on_start(self) -> None:
        options = _options(self)
        self.number = next(self._ids)
        self.rng = random.Random(f"load-mcp:{RUN}:{self.number}")
        self.corpus = _corpus(options.corpus_memories, options.corpus_tenants)
        self.session = f"mcp-{RUN}-{self.number}"
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if options.mcp_token:
            self.headers["Authorization"] = f"Bearer {options.mcp_token}"

    def _tool(self, tool: str, arguments: dict[str, Any]) -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        with self.client.post(
            "", json=body, headers=self.headers, name=f"mcp {tool}", catch_response=True, timeout=30
        ) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return
            try:
                reply = response.json()
            except ValueError:
                response.failure(f"not JSON: {response.text[:200]}")
                return
            if "error" in reply:
                response.failure(f"JSON-RPC error: {reply['error']}")
            elif reply.get("result", {}).get("isError"):
                response.failure(f"tool error: {json.dumps(reply['result'].get('content'))[:300]}")
            elif (reply["result"].get("structuredContent") or {}).get("channels_degraded"):
                _degraded[f"POST mcp {tool}"] += 1

    # No memory_summarize: it needs a session with turns, and MCP has no tool that appends one.
    @task(4)
    def recall(self) -> None:
        spec = recall_query(self.corpus, self.rng, datetime.now(UTC))
        self._tool("memory_recall", {"session_id": self.session, "query": spec.text})

    @task(1)
    def write(self) -> None:
        memory = self.rng.choice(self.corpus.memories)
        self._tool(
            "memory_write",
            {
                "session_id": self.session,
                "memory_type": memory.tier,
                "kind": memory.kind,
                "summary": f"{memory.content} #{self.rng.randrange(10**6)}",
                "entities": memory.entities,
                "subject": memory.subject,
            },
        )
