"""The console's pure parts, table-driven: the language choice, the catalogue, the session table, the
login throttle, the form bounds, the chart geometry, the recall explanation, the metrics reader."""

from __future__ import annotations

import string
from datetime import UTC, datetime

import pytest

from console.backend import MAX_METRIC_LINES, parse_metrics
from console.charts import bar_chart, line_chart
from console.explain import why_not
from console.forms import FieldError, memory_filter, memory_ids, recall_form
from console.i18n import CATALOGUE, negotiate, translate
from console.pages import believed_at
from console.sessions import LoginThrottle, SessionTable
from hindsight.v1 import memory_pb2 as pb


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("header", "language"),
    [
        ("", "en"),
        ("zh-CN,zh;q=0.9,en;q=0.8", "zh"),
        ("en-US,en;q=0.9,zh;q=0.8", "en"),
        ("zh-TW", "zh"),
        ("fr-FR,zh;q=0.5", "zh"),
        ("fr-FR,de", "en"),
        ("en;q=0.2,zh;q=0.3", "zh"),
        ("zh;q=0", "en"),
        ("zh;q=abc,en", "en"),
        ("zh," * 10_000, "zh"),  # long: read up to a bound, never an error
        ("en,zh", "en"),  # a tie: the first listed
    ],
)
def test_the_language_follows_accept_language(header: str, language: str) -> None:
    assert negotiate(header) == language


def test_every_message_has_both_languages_with_the_same_placeholders() -> None:
    fields = string.Formatter()
    for key, (english, chinese) in CATALOGUE.items():
        assert english and chinese, key
        names = [{name for _, name, _, _ in fields.parse(text) if name} for text in (english, chinese)]
        assert names[0] == names[1], key
    assert translate("zh", "who", tenant="acme") == "租户 acme"


def test_sessions_are_bounded_and_end_when_idle() -> None:
    clock = Clock()
    table = SessionTable(capacity=2, idle_s=60, clock=clock)
    first, second = table.create("a", "hs_1_x"), table.create("b", "hs_2_x")
    assert table.get(first.session_id) is first  # used now: the newest
    third = table.create("c", "hs_3_x")
    assert len(table) == 2 and table.get(second.session_id) is None  # the least recently used went
    clock.now += 59
    assert table.get(first.session_id) is first  # its idle time starts again
    clock.now += 60
    assert table.get(first.session_id) is None and table.get(third.session_id) is None
    assert table.get("") is None and table.get("x" * 65) is None
    assert first.session_id != first.csrf_token and len(first.session_id) >= 40
    assert first.csrf_matches(first.csrf_token) and not first.csrf_matches("") and not first.csrf_matches("x")


def test_the_login_throttle_counts_failures_per_address_per_minute() -> None:
    clock = Clock()
    throttle = LoginThrottle(per_minute=2, addresses=2, clock=clock)
    for _ in range(2):
        assert throttle.allowed("10.0.0.1")
        throttle.failed("10.0.0.1")
    assert not throttle.allowed("10.0.0.1") and throttle.allowed("10.0.0.2")
    clock.now += 60
    assert throttle.allowed("10.0.0.1")
    for address in ("a", "b", "c"):  # the table forgets the oldest address past its bound
        throttle.failed(address)
    assert len(throttle._failures) == 2


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"subject": "a", "page_size": "0"}, "page_size"),
        ({"subject": "a", "page_size": "30"}, "page_size"),
        ({"subject": "a", "page_size": "1e3"}, "page_size"),
        ({"subject": "a", "kind": "gossip"}, "kind"),
        ({"subject": "a\x00"}, "subject"),
        ({"subject": "a", "until": "2026-13-01"}, "until"),
        ({"subject": "a", "page_token": "t" * 2049}, "page_token"),
    ],
)
def test_memory_filters_are_bounded(values: dict[str, str], field: str) -> None:
    with pytest.raises(FieldError) as refused:
        memory_filter(values)
    assert refused.value.field == field


def test_a_memory_filter_reads_times_as_utc_and_matches_text_and_time() -> None:
    wanted = memory_filter({"subject": "a", "text": "Tea", "since": "2026-03-01T09:30", "status": "ACTIVE"})
    assert wanted.since == datetime(2026, 3, 1, 9, 30, tzinfo=UTC) and wanted.status == "active"
    assert wanted.filters_in_console
    assert wanted.matches("likes green tea", datetime(2026, 3, 2, tzinfo=UTC))
    assert not wanted.matches("likes coffee", datetime(2026, 3, 2, tzinfo=UTC))
    assert not wanted.matches("tea", datetime(2026, 2, 28, tzinfo=UTC))
    assert wanted.query(page_token="next")["page_token"] == "next"
    assert not memory_filter({"subject": ""}).filters_in_console


def test_recall_forms_and_bulk_ids_are_bounded() -> None:
    with pytest.raises(FieldError, match="query: required"):
        recall_form({"query": "  "})
    assert recall_form({"query": "q", "budget": "32000", "top_k": "100"}).token_budget == 32000
    with pytest.raises(FieldError, match="budget"):
        recall_form({"query": "q", "budget": "32001"})
    assert memory_ids(["01a22b8a-0000-7000-8000-000000000000"] * 3) == [
        "01a22b8a-0000-7000-8000-000000000000"
    ]
    with pytest.raises(FieldError, match="ids: a memory id"):
        memory_ids(["../etc"])


def test_a_line_chart_puts_values_and_the_target_on_one_scale() -> None:
    chart = line_chart([("p99", "p99", [10.0, None, 90.0]), ("p50", "p50", [])], target=80.0)
    assert chart.top == 100.0  # 90 x 1.1 rounded up to a readable top
    points = [tuple(map(float, p.split(","))) for p in chart.series[0].points.split()]
    assert len(points) == 2 and points[0][0] < points[1][0]  # the missing sample is skipped
    assert chart.series[0].last == 90.0 and chart.series[1].points == "" and chart.series[1].last is None
    assert chart.target_y is not None and points[1][1] < chart.target_y < points[0][1]  # 90 above 80
    flat = line_chart([("p99", "p99", [5.0])])
    assert flat.target_y is None and flat.top == 10.0


def test_a_bar_chart_marks_the_stages_over_the_target() -> None:
    chart = bar_chart([("embed", 12.0), ("vector", 95.0)], target=80.0)
    assert [bar.over for bar in chart.bars] == [False, True]
    assert chart.bars[1].width > chart.bars[0].width and chart.target_x is not None


def _hit(memory_id: str, score: float, packed: bool = True) -> pb.RecallHit:
    return pb.RecallHit(memory=pb.Memory(id=memory_id), score=score, packed=packed)


def _answer(hits: list[pb.RecallHit], lexical: list[str], vector: list[str]) -> pb.RecallResponse:
    return pb.RecallResponse(
        hits=hits,
        explanation=pb.RecallExplanation(
            channels=[
                pb.ChannelCandidates(channel=pb.CHANNEL_LEXICAL, memory_ids=lexical),
                pb.ChannelCandidates(channel=pb.CHANNEL_VECTOR, memory_ids=vector),
            ]
        ),
    )


ACTIVE = pb.Memory(id="m", subject="alice", status=pb.STATUS_ACTIVE)


@pytest.mark.parametrize(
    ("expected", "subject", "response", "probe", "keys"),
    [
        (ACTIVE, "", _answer([_hit("m", 0.5)], ["m"], []), None, ["why.returned"]),
        (
            ACTIVE,
            "",
            _answer([_hit("m", 0.5, packed=False)], ["m"], []),
            None,
            ["why.returned", "why.not_packed"],
        ),
        (None, "", _answer([], [], []), None, ["why.missing"]),
        (
            pb.Memory(id="m", subject="alice", status=pb.STATUS_PENDING),
            "bob",
            _answer([], [], []),
            _answer([], [], []),
            ["why.status", "why.subject"],
        ),
        (
            ACTIVE,
            "",
            _answer([_hit("a", 0.9)], ["a"], ["a"]),
            _answer([_hit("a", 0.9)], ["a"], ["a"]),
            ["why.no_channel"],
        ),
        (
            ACTIVE,
            "",
            _answer([_hit("a", 0.9)], ["a"], ["a"]),
            _answer([_hit("a", 0.9), _hit("m", 0.95)], ["a", "m"], ["a"]),
            ["why.channels_found", "why.channels_missed", "why.top_k"],
        ),
        (
            ACTIVE,
            "",
            _answer([_hit("a", 0.9)], ["a"], ["a"]),
            _answer([_hit("a", 0.9), _hit("m", 0.1)], ["a", "m"], ["a", "m"]),
            ["why.channels_found", "why.threshold"],
        ),
        (
            ACTIVE,
            "",
            _answer([], [], []),
            _answer([_hit("m", 0.1)], ["m"], []),
            ["why.channels_found", "why.channels_missed", "why.threshold_none"],
        ),
        (
            ACTIVE,
            "",
            _answer([], [], []),
            _answer([], ["m"], []),
            ["why.channels_found", "why.channels_missed", "why.dropped"],
        ),
    ],
    ids=[
        "returned",
        "over-budget",
        "invisible",
        "pending-other-subject",
        "no-channel",
        "top-k",
        "threshold",
        "threshold-nothing",
        "dropped",
    ],
)
def test_why_a_memory_was_not_recalled(
    expected: pb.Memory | None,
    subject: str,
    response: pb.RecallResponse,
    probe: pb.RecallResponse | None,
    keys: list[str],
) -> None:
    reasons = why_not("m", expected, subject, response, probe)
    assert [reason.key for reason in reasons] == keys
    for reason in reasons:  # each renders in both languages
        assert translate("en", reason.key, **reason.values) and translate("zh", reason.key, **reason.values)


def test_metrics_keep_the_hindsight_series_without_buckets_within_a_bound() -> None:
    text = "\n".join(
        [
            "# HELP hindsight_recall_p99_milliseconds Recall p99",
            'hindsight_recall_p99_milliseconds{hindsight_server="a"} 41.5',
            'hindsight_stage_duration_seconds_bucket{le="0.1"} 3',
            "hindsight_stage_duration_seconds_count 3",
            "process_cpu_seconds_total 1",
            "db_client_connection_count 4",
        ]
    )
    lines = parse_metrics(text)
    assert [(m.name, m.labels, m.value) for m in lines] == [
        ("hindsight_recall_p99_milliseconds", 'hindsight_server="a"', "41.5"),
        ("hindsight_stage_duration_seconds_count", "", "3"),
        ("db_client_connection_count", "", "4"),
    ]
    assert len(parse_metrics("hindsight_x 1\n" * (MAX_METRIC_LINES + 50))) == MAX_METRIC_LINES


def test_the_version_believed_at_a_time_is_the_latest_recorded_by_then() -> None:
    versions = []
    for second, memory_id in ((10, "v1"), (20, "v2")):
        version = pb.Memory(id=memory_id)
        version.created_at.FromSeconds(second)
        versions.append(version)

    def at(second: int) -> datetime:
        return datetime.fromtimestamp(second, UTC)

    assert believed_at(versions, at(5)) is None
    believed = [believed_at(versions, at(s)) for s in (10, 15, 25)]
    assert [b.id if b is not None else None for b in believed] == ["v1", "v1", "v2"]
    assert believed_at(versions, None) is None
