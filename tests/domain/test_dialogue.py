import pytest

from hindsight_server.domain.dialogue import (
    Answer,
    answer,
    asks_for,
    done_action,
    ends_asking,
    has_change_cue,
    is_cancel,
    is_proposal,
    questions,
    request_clause,
)
from hindsight_server.domain.intents import find_intent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("好的", Answer.YES),
        ("好的，改成周五", Answer.YES),
        ("可以", Answer.YES),
        ("对", Answer.YES),
        ("确认", Answer.YES),
        ("没问题！", Answer.YES),
        ("不", Answer.NO),
        ("不，改成周五", Answer.NO),
        ("不要了", Answer.NO),
        ("不行", Answer.NO),
        ("yes", Answer.YES),
        ("OK, book it", Answer.YES),
        ("Sure.", Answer.YES),
        ("no problem", Answer.YES),  # not a "no"
        ("No, make it Friday", Answer.NO),
        ("nope", Answer.NO),
        ("可以帮我订会议室吗", None),  # a request that opens with 可以
        ("不要靠窗的", None),  # a parameter, not an answer
        ("对了，还有一件事", None),  # "by the way"
        ("是301吗", None),
        ("Okayish", None),
        ("nobody", None),
        ("我要订会议室", None),
    ],
)
def test_answer(text: str, expected: Answer | None) -> None:
    assert answer(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("改成周五", True),
        ("换成B栋", True),
        ("推迟到下午", True),
        ("不是周三，是周五", True),
        ("make it Friday", True),
        ("move it to 3pm", True),
        ("Change it to building B", True),
        ("let's do Friday instead", True),
        ("周五", False),
        ("Friday works", False),
    ],
)
def test_change_cue(text: str, expected: bool) -> None:
    assert has_change_cue(text) is expected


@pytest.mark.parametrize(
    ("text", "clause"),
    [
        ("我要订下周三下午的会议室, 10个人, A栋", "订下周三下午的会议室"),
        ("帮我查一下订单状态", "查一下订单状态"),
        ("麻烦你导出上个月的报表。", "导出上个月的报表"),
        ("I want to book a meeting room, please", "book a meeting room"),
        ("Can you please check my order?", "check my order"),
        ("I'd like a table for four", "a table for four"),
        ("请问会议室在哪", None),  # "may I ask": a question, not a request
        ("好的", None),
        ("The weather is nice", None),
    ],
)
def test_request_clause(text: str, clause: str | None) -> None:
    assert request_clause(text) == clause


@pytest.mark.parametrize(
    ("text", "asked"),
    [
        ("好的，下周三下午A栋有空，请问几点开始？", ["请问几点开始？"]),
        ("请问几位？需要投影仪吗", ["请问几位？", "需要投影仪吗"]),
        ("Which building, A or B? I can hold both.", ["Which building, A or B?"]),
        ("OK, what time should it start?", ["what time should it start?"]),
        ("已为您预订。", []),
    ],
)
def test_questions(text: str, asked: list[str]) -> None:
    assert questions(text) == asked


@pytest.mark.parametrize(
    ("question", "slots"),
    [
        ("请问几位？", ("people",)),
        ("请问几点开始？", ("time",)),
        ("哪天？哪栋楼？", ("date", "place")),
        ("How many people, and when?", ("people", "date")),
        ("Which room would you like?", ("place",)),
        ("Who will attend?", ("participants",)),
        ("需要投影仪吗？", ()),
    ],
)
def test_asks_for(question: str, slots: tuple[str, ...]) -> None:
    assert asks_for(question) == slots


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("301会议室有空，可以吗？", True),
        ("为您推荐A栋301", True),
        ("Room 301 is available. Shall I book it?", True),
        ("How about Friday?", True),
        ("请问几位？", False),
        ("What time?", False),
    ],
)
def test_is_proposal(text: str, expected: bool) -> None:
    assert is_proposal(text) is expected


@pytest.mark.parametrize(
    ("text", "done"),
    [
        ("好的。已为您预订A栋301会议室。还需要别的吗？", "已为您预订A栋301会议室。"),
        ("预订成功！", "预订成功！"),
        ("I've booked room 301 for Friday. Anything else?", "I've booked room 301 for Friday."),
        ("Your refund has been submitted.", "Your refund has been submitted."),
        ("请问几位？", None),
        ("Shall I book it?", None),
    ],
)
def test_done_action(text: str, done: str | None) -> None:
    assert done_action(text) == done


@pytest.mark.parametrize(
    ("text", "expected"),
    [("算了，不订了", True), ("取消预订", True), ("never mind", True), ("改成周五", False), ("ok", False)],
)
def test_is_cancel(text: str, expected: bool) -> None:
    assert is_cancel(text) is expected


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("我要订会议室", "book_meeting_room"),
        ("book a conference room", "book_meeting_room"),
        ("帮我订张去上海的机票", "book_flight"),
        ("I need a flight to Berlin", "book_flight"),
        ("明天和张三开会", "schedule_meeting"),
        ("schedule a meeting with Alice", "schedule_meeting"),
        ("我要退款", "refund"),
        ("my laptop is broken", "report_issue"),
        ("导出CSV", "export_report"),
        ("remind me tomorrow", "set_reminder"),
        ("今天天气不错", None),
    ],
)
def test_find_intent(text: str, intent: str | None) -> None:
    found = find_intent(text)
    assert (found.key if found else None) == intent


@pytest.mark.parametrize(
    ("text", "asking"),
    [
        ("Where did you go on that road trip?", True),
        ('Melanie said, "Wow, great pic! Where did you go on that road trip?"', True),
        ("你周末去哪儿了？", True),
        ("那本书你看完了吗", True),
        ("你觉得呢 ~", True),
        ("（你去了吗？）", True),
        ("Did you? I went to the lake on Sunday.", False),  # asked, then told
        ("I went to the lake.", False),
        ("什么都没有。", False),
        ("", False),
        ("?" * 10_000 + "no", False),  # reads the end only
    ],
)
def test_ends_asking(text: str, asking: bool) -> None:
    assert ends_asking(text) is asking
