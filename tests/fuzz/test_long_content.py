"""Regressions for two bugs the fuzzing found, both from the B-tree index `memories_peers` (migration
0006) on `content_key`, then the normalised content itself: PostgreSQL refuses an index row over 2,704
bytes (after compression), so a memory whose content did not compress below that could not be stored
(ProgramLimitExceededError -> INTERNAL) although limits allow 16 KiB. Migration 0009 indexes the
content's MD5 instead.
"""

from __future__ import annotations

import random

from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc


def _chinese(count: int, seed: int) -> str:
    rnd = random.Random(seed)
    return "".join(chr(rnd.randint(0x4E00, 0x9FFF)) for _ in range(count))


async def test_long_content_that_does_not_compress_is_stored(
    stub: pb_grpc.MemoryServiceAsyncStub, tenant: str
) -> None:
    content = _chinese(1_500, seed=1)  # 4,500 bytes: well inside the 16,384-byte limit
    memory = pb.MemoryInput(content=content, tier=pb.TIER_EPISODIC, kind=pb.KIND_EVENT)
    written = await stub.Write(pb.WriteRequest(tenant_id=tenant, memory=memory), timeout=30)  # was INTERNAL
    assert written.memory.content == content


async def test_a_long_session_keeps_taking_turns(stub: pb_grpc.MemoryServiceAsyncStub, tenant: str) -> None:
    """Every entity a turn names joins the summary's confirmed parameters, and the summary is a memory:
    a session naming enough distinct entities breaks for good (every later turn: INTERNAL)."""
    for index in range(40):
        turn = pb.AppendTurnRequest(tenant_id=tenant, session_id="long", text=f"第{index}件事")
        turn.entities.update({f"item_{index}_{k}": _chinese(12, seed=index * 10 + k) for k in range(4)})
        await stub.AppendTurn(turn, timeout=30)  # INTERNAL from the summary's version on
