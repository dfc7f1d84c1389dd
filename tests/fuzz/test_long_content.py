"""Bugs the fuzzing found that are not fixed yet (outside what the fuzz work may change): each test fails
today and is marked xfail(strict), so it turns into a failure the day the bug is fixed, to be unmarked.
(They call the stub directly: their INTERNAL answers are not counted in the fuzz figures.)

Both come from the B-tree index `memories_peers` (migration 0006) on `content_key`, the normalised
content: PostgreSQL refuses an index row over 2,704 bytes (after compression), so a memory whose content
does not compress below that cannot be stored: ProgramLimitExceededError -> INTERNAL. Limits allow 16 KiB.
"""

from __future__ import annotations

import random

import pytest

from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc

BUG = "memories_peers indexes content_key: rows over 2704 bytes -> ProgramLimitExceededError -> INTERNAL"


def _chinese(count: int, seed: int) -> str:
    rnd = random.Random(seed)
    return "".join(chr(rnd.randint(0x4E00, 0x9FFF)) for _ in range(count))


@pytest.mark.xfail(strict=True, reason=BUG)
async def test_long_content_that_does_not_compress_is_stored(
    stub: pb_grpc.MemoryServiceStub, tenant: str
) -> None:
    content = _chinese(1_500, seed=1)  # 4,500 bytes: well inside the 16,384-byte limit
    memory = pb.MemoryInput(content=content, tier=pb.TIER_EPISODIC, kind=pb.KIND_EVENT)
    written = await stub.Write(pb.WriteRequest(tenant_id=tenant, memory=memory), timeout=30)  # INTERNAL
    assert written.memory.content == content


@pytest.mark.xfail(strict=True, reason=f"the session summary grows with every entity named; {BUG}")
async def test_a_long_session_keeps_taking_turns(stub: pb_grpc.MemoryServiceStub, tenant: str) -> None:
    """Every entity a turn names joins the summary's confirmed parameters, and the summary is a memory:
    a session naming enough distinct entities breaks for good (every later turn: INTERNAL)."""
    for index in range(40):
        turn = pb.AppendTurnRequest(tenant_id=tenant, session_id="long", text=f"第{index}件事")
        turn.entities.update({f"item_{index}_{k}": _chinese(12, seed=index * 10 + k) for k in range(4)})
        await stub.AppendTurn(turn, timeout=30)  # INTERNAL from the summary's version on
