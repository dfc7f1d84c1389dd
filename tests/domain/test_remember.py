import pytest

from hindsight_server.domain import remember
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.lifecycle import initial_status
from hindsight_server.domain.model import Kind, Status, Tier
from hindsight_server.domain.policy import WritePolicy
from hindsight_server.domain.remember import decide

SEMANTIC, EPISODIC = Tier.SEMANTIC, Tier.EPISODIC
PREF, FACT, INSTR, EVENT = Kind.PREFERENCE, Kind.FACT, Kind.INSTRUCTION, Kind.EVENT

# (text, tier, kind, confidence, cue): kept.
KEPT = [
    ("以后都给我订靠窗的位置", SEMANTIC, PREF, remember.EXPLICIT, "以后"),
    ("from now on always book me a window seat", SEMANTIC, PREF, remember.EXPLICIT, "from now on"),
    ("Always book me a window seat.", SEMANTIC, PREF, remember.EXPLICIT, "Always book"),
    ("我以后都用中文回复我", SEMANTIC, PREF, remember.EXPLICIT, "以后"),
    ("每次都帮我选靠过道的座位", SEMANTIC, PREF, remember.EXPLICIT, "每次都"),
    ("In the future, send invoices as PDF", SEMANTIC, PREF, remember.EXPLICIT, "In the future"),
    ("Whenever I fly, book me an aisle seat", SEMANTIC, PREF, remember.EXPLICIT, "Whenever"),
    ("记住我的生日是5月8号", SEMANTIC, FACT, remember.EXPLICIT, "记住"),
    ("remember that my flight is on Friday", SEMANTIC, FACT, remember.EXPLICIT, "remember"),
    ("remember: the wifi password is 1234", SEMANTIC, FACT, remember.EXPLICIT, "remember"),
    ("记住，下周三交报告", EPISODIC, EVENT, remember.EXPLICIT, "记住"),
    ("以后别再给我打电话", SEMANTIC, INSTR, remember.EXPLICIT, "以后"),
    ("别再给我发邮件了", SEMANTIC, INSTR, remember.PROHIBITION, "别再"),
    (
        "never book me a middle seat again",
        SEMANTIC,
        INSTR,
        remember.PROHIBITION,
        "never book me a middle seat again",
    ),
    ("我总是坐靠窗", SEMANTIC, PREF, remember.HABIT, "我总是"),
    ("I always take the stairs", SEMANTIC, PREF, remember.HABIT, "I always"),
    ("我偏好CSV格式导出", SEMANTIC, PREF, remember.PREFER, "我偏好"),
    ("I prefer CSV exports", SEMANTIC, PREF, remember.PREFER, "I prefer"),
    ("我喜欢靠窗的位置", SEMANTIC, PREF, remember.LIKE, "我喜欢"),
    ("我其实不太喜欢辣", SEMANTIC, PREF, remember.LIKE, "我其实不太喜欢"),
    ("I don't like spicy food", SEMANTIC, PREF, remember.LIKE, "I don't like"),
    ("我叫王小明", SEMANTIC, FACT, remember.FACT, "我叫"),
    ("My name is Alice", SEMANTIC, FACT, remember.FACT, "My name is"),
    ("I live in Berlin", SEMANTIC, FACT, remember.FACT, "I live in"),
    ("I work at Acme as an engineer", SEMANTIC, FACT, remember.FACT, "I work at"),
    ("我的邮箱是a@b.com", SEMANTIC, FACT, remember.STATED_FACT, "我的邮箱是"),
    ("我下周去上海出差", EPISODIC, EVENT, remember.EVENT, ""),
    ("I'm moving to Berlin next month", EPISODIC, EVENT, remember.EVENT, ""),
    ("我今天去了北京", EPISODIC, EVENT, remember.EVENT, ""),  # 今天 dates an event
]


@pytest.mark.parametrize(("text", "tier", "kind", "confidence", "cue"), KEPT)
def test_kept(text: str, tier: Tier, kind: Kind, confidence: float, cue: str) -> None:
    decision = decide(text)
    assert decision.keep
    assert (decision.tier, decision.kind, decision.cue) == (tier, kind, cue)
    assert decision.confidence == pytest.approx(confidence)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("以后都给我订靠窗的位置", Status.ACTIVE),  # explicit: semantic at once
        ("from now on always book me a window seat", Status.ACTIVE),
        ("我喜欢靠窗的位置", Status.ACTIVE),
        ("我可能喜欢靠窗", Status.PENDING),  # hedged
        ("maybe I prefer aisle seats", Status.PENDING),
        ("这次我喜欢靠窗", Status.PENDING),  # for this once
        ("I like the window seat today", Status.PENDING),
        ("我下周去上海出差", Status.PENDING),  # an event without a cue waits for confirmation
    ],
)
def test_weak_signals_wait_in_pending(text: str, status: Status) -> None:
    decision = decide(text)
    assert decision.keep
    assert initial_status(decision.confidence, WritePolicy()) is status


def test_an_explicit_preference_is_confident_enough_to_keep_at_once() -> None:
    for text in ("以后都给我订靠窗的位置", "from now on always book me a window seat"):
        decision = decide(text)
        assert (decision.tier, decision.kind) == (Tier.SEMANTIC, Kind.PREFERENCE)
        assert decision.confidence >= 0.9


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("你好", "greeting or acknowledgement"),
        ("thanks!", "greeting or acknowledgement"),
        ("好的", "greeting or acknowledgement"),
        ("今天天气不错", "no cue that it matters later"),
        ("我一直在等", "no cue that it matters later"),  # 一直 as "all along", not a habit
        ("以后再说", "no cue that it matters later"),  # "later", not "from now on"
        ("我下班以后去健身", "no cue that it matters later"),  # "after work"
        ("这次订下午", "a one-off task parameter"),
        ("this time, a window seat", "a one-off task parameter"),
        ("帮我订会议室", "a task request: its parameters belong to the session summary"),
        ("I'd like to book a room", "a task request: its parameters belong to the session summary"),
        (
            "I want to visit Paris in the future",
            "a task request: its parameters belong to the session summary",
        ),
        ("你记得我喜欢什么吗？", "a question"),
        ("Do you remember my name?", "a question"),
        ("记住这个", "names the conversation, not a statement: consolidate the session"),
        ("remember this", "names the conversation, not a statement: consolidate the session"),
        ("记住", "names the conversation, not a statement: consolidate the session"),
    ],
)
def test_not_kept(text: str, reason: str) -> None:
    decision = decide(text)
    assert not decision.keep
    assert (decision.tier, decision.confidence, decision.reason) == (Tier.WORKING, 0.0, reason)


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("记住我的生日是5月8号。", "我的生日是5月8号"),
        ("请记住：我住在杭州", "我住在杭州"),
        ("Please remember that   my seat is 12A!", "my seat is 12A"),
        ("以后都给我订靠窗的位置", "以后都给我订靠窗的位置"),
        ("Ｉ　ｌｉｖｅ　in Berlin", "I live in Berlin"),  # full-width folded
    ],
)
def test_content_is_normalised_and_loses_the_remember_cue(text: str, content: str) -> None:
    assert decide(text).content == content


def test_confidence_is_a_probability() -> None:
    for text, *_ in KEPT:
        assert 0.0 <= decide(text).confidence <= 1.0


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_blank_text_is_rejected_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        decide(text)
    assert error.value.field == "text"
