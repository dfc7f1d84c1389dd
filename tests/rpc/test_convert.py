"""The proto conversions' own arithmetic (the servicer tests cover the rest through real gRPC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf import timestamp_pb2

from hindsight_server.rpc.convert import time_out

BERLIN_SUMMER = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2024, 3, 15, 9, 30, 12, 345678, tzinfo=UTC),
        datetime(2024, 3, 15, 11, 30, 12, 345678, tzinfo=BERLIN_SUMMER),  # another offset, same moment
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # before the epoch: nanos stay positive
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_a_time_goes_out_as_timestamp_from_datetime_writes_it(moment: datetime) -> None:
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(moment.astimezone(UTC))
    written = timestamp_pb2.Timestamp()
    time_out(written, moment)
    assert written == expected
    assert 0 <= written.nanos < 1_000_000_000


def test_no_time_leaves_the_field_unset() -> None:
    written = timestamp_pb2.Timestamp()
    time_out(written, None)
    assert written == timestamp_pb2.Timestamp()
