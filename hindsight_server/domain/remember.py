"""Remember or not: whether a user's turn is worth keeping beyond the session, as what, and how sure.

The original design's test (docs/design.md): explicit, stable, useful later. A rule pre-filter reads cues
in Chinese and English:

* a durable cue with a statement: 以后/今后/每次都/记住/别忘了, from now on/going forward/remember/always
  + a verb: EXPLICIT 0.95, a preference (a fact, or an event, when the statement is one);
* a prohibition: 别再/不要再/以后别, never ... again/don't ever/stop ...ing: an instruction, PROHIBITION 0.9;
* a habit: 我总是/我一直/我习惯/我通常, I always/I usually/I never: a preference, HABIT 0.9;
* a stated preference: 我偏好/I prefer (PREFER 0.9); 我喜欢/我不喜欢/I like/I don't like/I love (LIKE 0.85);
* a fact about the user: 我叫/我住在/我在…工作, my name is/I live in/I work at (FACT 0.9); 我的X是Y/my X is
  Y (STATED_FACT 0.8);
* a first-person statement with a date (我下周去上海, I'm moving next month): an event, EVENT 0.6.

Preferences, facts and instructions are semantic; events are episodic.

Then: a hedge (可能/也许/maybe/I think) takes HEDGE_PENALTY off; a one-off marker (这次/暂时/this time/for
now, also 今天/today) caps a preference or fact at ONE_OFF_CAP. Not kept at all: greetings and thanks,
questions, task requests without a durable cue ("这次订下午", "帮我订会议室": their parameters belong to
the session summary), "记住这个" / "remember this" alone (it names the conversation: the caller
consolidates the session), and turns with no cue. The caller stores a kept decision below its
configured threshold (WritePolicy.pending_below_confidence, 0.7) as PENDING.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from hindsight_server.domain.conversation import require_text
from hindsight_server.domain.dialogue import request_clause
from hindsight_server.domain.model import Kind, Tier
from hindsight_server.domain.slots import normalise
from hindsight_server.domain.timeparse import find_times

__all__ = [
    "EVENT",
    "EXPLICIT",
    "FACT",
    "HABIT",
    "HEDGE_PENALTY",
    "LIKE",
    "ONE_OFF_CAP",
    "PREFER",
    "PROHIBITION",
    "STATED_FACT",
    "RememberDecision",
    "decide",
]

EXPLICIT = 0.95  # a durable cue: the user asks for it to be kept
PROHIBITION = 0.9
HABIT = 0.9
PREFER = 0.9
LIKE = 0.85
FACT = 0.9  # name, home, workplace
STATED_FACT = 0.8  # "my X is Y"
EVENT = 0.6  # below the default 0.7: pending until confirmed
HEDGE_PENALTY = 0.3
ONE_OFF_CAP = 0.5
_FLOOR = 0.1


@dataclass(frozen=True, slots=True)
class RememberDecision:
    keep: bool
    tier: Tier  # WORKING when not kept: the turn lives on only in the session
    kind: Kind
    confidence: float  # in [0, 1]; 0 when not kept
    cue: str  # the words that decided it, as written; "" when none
    content: str  # what to store: the turn without its "记住"/"remember that", white space folded
    reason: str


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_START = r"(?:^|(?<=[,.!?;:]\s)|(?<=[,.!?;:]))"
_DURABLE = _re(
    r"(?:(?<=^)|(?<=[,.!?;:\s我你请那就也都]))以后(?!再|有空|有时间|的事)|今后|往后|从今以后|从现在起|从现在开始|"
    r"每次都|下次都|一律|永远|\bfrom\s+now\s+on\b|\bgoing\s+forward\b|\bfrom\s+here\s+on\b|\bevery\s+time\b|"
    rf"{_START}\s*(?:in\s+(?:the\s+)?future|whenever)\b|"
    rf"{_START}\s*(?:please\s+)?always\s+(?!been\b)\w+"
)
_REMEMBER = _re(
    r"(?:请|帮我)?(?<!我)记住(?!了)|记一下|记下来|别忘了|不要忘了|"
    rf"{_START}\s*(?:please\s+|and\s+)?(?:remember|don't\s+forget|do\s+not\s+forget)\b|\bplease\s+remember\b"
)
_PROHIBIT = _re(
    r"别再|不要再|再也不要|再也别|以后别|以后不要|以后不用|\bnever\s+(?:\w+\s+){0,6}?again\b|\bdon't\s+ever\b|"
    r"\bdo\s+not\s+ever\b|\bnever\s+ever\b|\bstop\s+\w+ing\b"
)
_HABIT = _re(
    r"我总是|我一直(?!在|没|等)|我每次都|我通常|我习惯|我一般|我向来|我从来不|我从不|"
    r"\bi\s+(?:always|usually|normally|never)\b|\bi\s+tend\s+to\b|\bi'm\s+used\s+to\b"
)
_ADVERBS = "(?:可能|也许|大概|或许|其实|好像|还是|真的|很|非常|特别|比较|挺|蛮|更|最|也|都){0,2}"
_PREFER = _re(
    rf"我{_ADVERBS}(?:偏好|偏爱|倾向)|\bi\s+(?:really\s+)?prefer\b|\bi'?d\s+rather\b|\bmy\s+favou?rite\b"
)
_LIKE = _re(
    rf"我{_ADVERBS}(?:喜欢|讨厌|受不了)|我{_ADVERBS}不(?:太|怎么)?喜欢|"
    r"\bi\s+(?:really\s+|also\s+)?(?:like|love|hate|dislike|enjoy)\b|\bi\s+can'?t\s+stand\b|"
    r"\bi\s+(?:don'?t|do\s+not)\s+(?:really\s+)?(?:like|enjoy)\b"
)
_FACT = _re(
    r"我叫|我的名字(?:是|叫)|我姓|我住在|我家在|我在.{1,15}?(?:工作|上班|上学|读书)|"
    r"\bmy\s+name\s+is\b|\bi\s+live\s+in\b|\bi\s+work\s+(?:at|for|in|as)\b|\bi'?m\s+from\b|\bi\s+am\s+from\b|"
    r"\bi'?m\s+based\s+in\b"
)
_STATED_FACT = _re(
    r"我的[^,.!?;:]{1,10}?(?:是|叫|在)|\bmy\s+\w+(?:\s+\w+)?\s+(?:is|are)\b|\bi\s+have\s+(?:a|an|\d+)\b"
)
_HEDGE = _re(
    r"可能|也许|大概|或许|好像|似乎|应该吧|说不定|不太确定|\bmaybe\b|\bmight\b|\bperhaps\b|\bprobably\b|"
    r"\bi\s+think\b|\bi\s+guess\b|\bnot\s+sure\b"
)
_ONE_OFF = _re(
    r"这次|这一次|本次|这回|暂时|临时|先这样|就这一次|\bthis\s+time\b|\bjust\s+this\s+once\b|"
    r"\bthis\s+once\b|\bfor\s+now\b|\bfor\s+this\s+(?:booking|trip|meeting|order)\b"
)
_TODAY = _re(r"今天|今晚|\btoday\b|\btonight\b")  # one-off for a preference, a date for an event
_QUESTION = _re(
    r"[?？]\s*$|[吗呢么]\s*$|为什么|怎么|什么|哪|多少|"
    r"^(?:what|when|where|who|whom|why|how|do|does|did|can|could|is|are|was|will|would|should)\b"
)
_CHITCHAT = _re(
    r"(?:你好|您好|嗨|哈喽|谢谢|多谢|感谢|好的|好|嗯|哦|再见|拜拜|早上好|晚上好|晚安|hi|hello|hey|thanks|"
    r"thank\s+you|ok|okay|bye|goodbye|good\s+morning|good\s+night|cool|great|nice)[\s!.,~…]*"
)
_FIRST_PERSON = _re(r"我|\b(?:i|i'm|i've|i'll|we|we're|my|our)\b")
_DEMONSTRATIVE_ONLY = _re(r"[\s,.!?;:]*(?:这个|这些|这件事|这一点|this|that|it|these)?[\s,.!?;:]*")
_LEADING_CUE = _re(
    r"^(?:请|帮我)?(?:记住|记一下|记下来|别忘了|不要忘了)[\s,.:!]*|"
    r"^(?:please\s+)?(?:remember|don't\s+forget|do\s+not\s+forget)(?:\s+that)?[\s,.:!]*"
)
# Only whether a time is mentioned matters here, not when: any fixed day inside timeparse's tables.
_REFERENCE = datetime(2025, 1, 1, tzinfo=UTC)
_TIER = {Kind.EVENT: Tier.EPISODIC}


def _mentions_time(text: str) -> bool:
    return any(not expression.vague for expression in find_times(text, _REFERENCE))


def _without_cue(clean: str) -> str:
    return _LEADING_CUE.sub("", clean).strip().rstrip("。.!！")


def _skip(clean: str, reason: str, cue: str = "") -> RememberDecision:
    return RememberDecision(False, Tier.WORKING, Kind.EVENT, 0.0, cue, clean, reason)


def _statement(clean: str) -> tuple[Kind, float, str] | None:
    """The strongest statement cue: what the turn says about the user, without a durable cue."""
    for pattern, kind, confidence in (
        (_PROHIBIT, Kind.INSTRUCTION, PROHIBITION),
        (_PREFER, Kind.PREFERENCE, PREFER),
        (_HABIT, Kind.PREFERENCE, HABIT),
        (_LIKE, Kind.PREFERENCE, LIKE),
        (_FACT, Kind.FACT, FACT),
        (_STATED_FACT, Kind.FACT, STATED_FACT),
    ):
        match = pattern.search(clean)
        if match:
            return kind, confidence, match[0]
    return None


def decide(text: str) -> RememberDecision:
    """Whether a user's turn is worth keeping, as what, and how sure (see the module's table).
    Raises InvalidArgument naming "text" when it is blank."""
    clean = normalise(require_text(text))
    if _CHITCHAT.fullmatch(clean):
        return _skip(clean, "greeting or acknowledgement")
    explicit = _DURABLE.search(clean) or _REMEMBER.search(clean)
    statement = _statement(clean)
    stripped = _without_cue(clean)
    content = stripped or clean
    if explicit is None:
        if _QUESTION.search(clean):
            return _skip(clean, "a question")
        if statement is None:
            if request_clause(clean) is not None:
                return _skip(clean, "a task request: its parameters belong to the session summary")
            if _ONE_OFF.search(clean):
                return _skip(clean, "a one-off task parameter")
            if _FIRST_PERSON.search(clean) and _mentions_time(clean):
                statement = (Kind.EVENT, EVENT, "")
            else:
                return _skip(clean, "no cue that it matters later")
        kind, confidence, cue = statement
        reason = f"{kind.value} stated"
        if kind is not Kind.EVENT and (_ONE_OFF.search(clean) or _TODAY.search(clean)):
            confidence = min(confidence, ONE_OFF_CAP)
            reason += ", for this once"
    else:
        cue = explicit[0].strip()
        if statement is not None:
            kind = statement[0]
        elif _DURABLE.search(clean):
            kind = Kind.PREFERENCE  # "以后都给我订靠窗的位置": how the user wants things done from now on
        elif _DEMONSTRATIVE_ONLY.fullmatch(stripped):
            return _skip(clean, "names the conversation, not a statement: consolidate the session", cue)
        else:
            kind = Kind.EVENT if _mentions_time(content) else Kind.FACT
        confidence, reason = EXPLICIT, f"explicit {kind.value}"
    hedge = _HEDGE.search(clean)
    if hedge:
        confidence, reason = max(confidence - HEDGE_PENALTY, _FLOOR), reason + ", hedged"
    return RememberDecision(True, _TIER.get(kind, Tier.SEMANTIC), kind, confidence, cue, content, reason)
