"""Reading a request's tenant from its first bytes, unparsed, table-driven over what protobuf writes and
what a hostile caller can send instead."""

from __future__ import annotations

import pytest

from hindsight.v1 import memory_pb2 as pb
from hindsight_server.rpc.wire import leading_string


@pytest.mark.parametrize(
    ("data", "tenant"),
    [
        (pb.RecallRequest(tenant_id="acme", query="x").SerializeToString(), "acme"),
        (pb.WriteBatchRequest(tenant_id="用户-7").SerializeToString(), "用户-7"),
        (pb.RecallRequest(tenant_id="t" * 300).SerializeToString(), "t" * 300),  # a two-byte length
        (pb.RecallRequest(query="no tenant").SerializeToString(), None),  # field 2 comes first
        (pb.RecallRequest(tenant_id="").SerializeToString(), None),  # nothing on the wire at all
        (b"", None),
        (b"\x0a", None),  # the length is missing
        (b"\x0a\x05abc", None),  # shorter than its length
        (b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", None),  # a varint past 64 bits
        (b"\x0a\x02\xff\xfe", None),  # not UTF-8
        (b"\x08\x01", None),  # field 1 as a varint
    ],
)
def test_the_leading_tenant_is_read_from_the_bytes(data: bytes, tenant: str | None) -> None:
    assert leading_string(data) == tenant
