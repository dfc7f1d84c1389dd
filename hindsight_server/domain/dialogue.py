"""What a turn does in the conversation, read from its words (Chinese or English): answers yes or no,
changes an earlier parameter, asks for something, asks a question, proposes, reports a task done,
cancels.

Each rule is a short table of cues; each cue must stand where it means what it says (an answer opens
the turn and ends at a pause, so "可以帮我..." is a request, not a yes, and "no problem" is a yes).
"""

from __future__ import annotations

import re
from enum import StrEnum

from hindsight_server.domain.slots import normalise

__all__ = [
    "Answer",
    "answer",
    "asks_for",
    "done_action",
    "ends_asking",
    "has_change_cue",
    "is_cancel",
    "is_proposal",
    "questions",
    "request_clause",
]


class Answer(StrEnum):
    YES = "yes"
    NO = "no"


def _alternatives(words: str) -> str:
    return "|".join(sorted(words.split("|"), key=len, reverse=True))


_ZH_PAUSE = r"(?=$|[\s,.!?;:~、。…]|啊|呀|吧|哈|呢|哦|喔)"
_YES_ZH = (
    "好的|好啊|好吧|好|可以的|可以|行的|行吧|行|对的|对|是的|是|"
    "确认|确定|没问题|就这样|就这个|嗯嗯|嗯|同意|成"
)
_NO_ZH = "不用了|不用|不要了|不要|不行|不可以|不对|不是|不好|算了|不"
_YES_EN = (
    "no problem|no worries|yes|yeah|yep|yup|ok|okay|sure|confirmed|confirm|sounds good|that works|"
    "go ahead|correct|right|perfect|great|fine|alright|all right"
)
_NO_EN = "no|nope|nah|don't|do not|not really|never mind|cancel"
# A leading ok/no may be followed by more ("好的，改成周五"): the answer is the first words.
_ANSWER = re.compile(
    rf"^(?:(?P<yes_zh>{_alternatives(_YES_ZH)})|(?P<no_zh>{_alternatives(_NO_ZH)})){_ZH_PAUSE}"
    rf"|^(?:(?P<yes_en>{_alternatives(_YES_EN)})|(?P<no_en>{_alternatives(_NO_EN)}))(?![a-z'])",
    re.IGNORECASE,
)
_CHANGE = re.compile(
    r"改成|换成|改到|改为|换到|换为|改在|挪到|推迟到|延到|提前到|不是.{1,12}[,，]?而?是|"
    r"\bchange\s+(?:it\s+|that\s+)?to\b|\bmake\s+it\b|\bmove\s+(?:it\s+)?to\b|\bswitch\s+(?:it\s+)?to\b|"
    r"\binstead\b|\breschedule|\bactually\b",
    re.IGNORECASE,
)
_REQUEST = re.compile(
    r"(?:我想要|我想|我要|我需要|请帮我|请你|帮我|帮忙|麻烦你?|能不能|能否|可不可以|可以帮我|给我|请(?!问))"
    r"|\b(?:i\s+want\s+to|i\s+want|i\s+need\s+to|i\s+need|i'd\s+like\s+to|i'd\s+like|i\s+would\s+like\s+to|"
    r"i\s+would\s+like|can\s+you|could\s+you|would\s+you|please|help\s+me|i'm\s+looking\s+to|let's)\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[,.!?;:\n。]")
_SENTENCE = re.compile(r"[^.!?。！？\n]*(?:[.!?。！？]+|\n|$)")
_ZH_QUESTION_END = re.compile(r"[吗呢么][\s~]*$")
_CLAUSE = re.compile(r"(?<=[,，;；])")
_ASKING = re.compile(
    r"吗|呢|什么|哪|几|多少|谁|怎么|是否|请问|要不要|\b(?:what|which|when|where|who|how|shall|should|would|do|does|"
    r"can|could|is|are|will)\b",
    re.IGNORECASE,
)
_ASKS = (
    (
        "people",
        r"几个人|多少人|几位|多少位|人数|how\s+many\s+(?:people|guests|of\s+you|attendees|persons)|party\s+size",
    ),
    (
        "date",
        r"哪天|哪一天|什么时候|哪个日子|日期|几号|星期几|周几|what\s+day|which\s+day|what\s+date|\bwhen\b",
    ),
    ("time", r"几点|什么时间|哪个时间|时段|时间段|what\s+time|which\s+time|time\s+slot|how\s+long"),
    (
        "place",
        r"哪栋|哪个楼|哪座|哪层|哪里|在哪|地点|哪个会议室|哪间|\bwhere\b|which\s+(?:building|room|floor)",
    ),
    ("participants", r"和谁|跟谁|参会人|参加的人|\bwho\b|\bwith\s+whom\b"),
)
_ASKS_RE = tuple((key, re.compile(pattern, re.IGNORECASE)) for key, pattern in _ASKS)
_PROPOSAL = re.compile(
    r"可以吗|好吗|行吗|可以不|要不要|是否|需要.{0,12}吗|对吗|确认.{0,8}吗|怎么样|如何|合适吗|推荐|建议|为您找到|有空|可用|"
    r"\bshall\s+i\b|\bshould\s+i\b|\bwould\s+you\s+like\b|\bdo\s+you\s+want\b|\bis\s+that\s+(?:ok|okay|alright|fine)\b|"
    r"\bdoes\s+that\s+work\b|\bhow\s+about\b|\bok(?:ay)?\s*\?|\bwork\s+for\s+you\b|\bsound\s+good\b|\bavailable\b|"
    r"\bi\s+found\b|\bi\s+can\s+book\b|\bi\s+suggest\b|\bi\s+recommend\b|\bconfirm\b",
    re.IGNORECASE,
)
_DONE = re.compile(
    r"已为您|已经为您|已帮您|已经帮您|已预订|已预定|已订好|预订成功|预定成功|已完成|已提交|已创建|已发送|已办理|已退款|搞定了?|"
    r"\bi'?ve\s+(?:booked|reserved|sent|created|submitted|scheduled|set)\b|\bi\s+have\s+(?:booked|reserved|sent|created|"
    r"submitted|scheduled|set)\b|\b(?:is|are|has\s+been|have\s+been)\s+(?:booked|reserved|confirmed|sent|created|"
    r"submitted|scheduled|refunded)\b|\ball\s+set\b|\bdone\b",
    re.IGNORECASE,
)
_CANCEL = re.compile(
    r"取消|不订了|不要了|不用了|算了|\bcancel\b|\bnever\s+mind\b|\bforget\s+it\b|\bno\s+longer\s+need\b",
    re.IGNORECASE,
)


def answer(text: str) -> Answer | None:
    """YES or NO when the turn opens with one ("好的", "不", "sure", "no"), else None."""
    match = _ANSWER.match(normalise(text))
    if match is None:
        return None
    return Answer.YES if match["yes_zh"] or match["yes_en"] else Answer.NO


def has_change_cue(text: str) -> bool:
    """ "改成周五", "换成B栋", "make it Friday", "move it to 3pm": the turn replaces what was agreed."""
    return _CHANGE.search(normalise(text)) is not None


def request_clause(text: str) -> str | None:
    """What the user asks for, from the first request cue to the end of its clause ("我要订会议室,
    10个人" -> "订会议室"); None when the turn asks for nothing."""
    clean = normalise(text)
    match = _REQUEST.search(clean)
    if match is None:
        return None
    rest = clean[match.end() :].lstrip(" ,:")
    rest = re.sub(r"^(?:please|to)\s+", "", rest, flags=re.IGNORECASE)
    clause = _CLAUSE_END.split(rest, maxsplit=1)[0].strip()
    return clause or None


def _from_asking_clause(sentence: str) -> str:
    """ "好的，A栋有空，请问几点开始？" -> "请问几点开始？": the sentence from its last clause that asks."""
    clauses = _CLAUSE.split(sentence)
    for start in range(len(clauses) - 1, -1, -1):
        if _ASKING.search(clauses[start]):
            return "".join(clauses[start:]).strip()
    return sentence


def questions(text: str) -> list[str]:
    """The questions asked, in order, each from the clause that asks ("好，请问几位？" -> ["请问几位？"])."""
    found = []
    for sentence in _SENTENCE.findall(text):
        stripped = sentence.strip()
        if stripped and (stripped[-1] in "?？" or _ZH_QUESTION_END.search(stripped)):
            found.append(_from_asking_clause(stripped))
    return found


def ends_asking(text: str) -> bool:
    """The text's last sentence is a question (closing quotes and brackets aside): the next turn answers
    it. Reads the end only, so it costs the same for any length."""
    tail = text[-_TAIL_CHARS:].rstrip(_CLOSERS)
    return tail.endswith(("?", "？")) or _ZH_QUESTION_END.search(tail) is not None


_TAIL_CHARS = 16
_CLOSERS = " \t\r\n\"'”’」』)）"


def asks_for(question: str) -> tuple[str, ...]:
    """The parameters a question asks about ("place" stands for building, floor or room)."""
    clean = normalise(question)
    return tuple(key for key, pattern in _ASKS_RE if pattern.search(clean))


def is_proposal(text: str) -> bool:
    """An assistant turn the user can say yes or no to: an offer, a suggestion, a yes/no question."""
    return _PROPOSAL.search(normalise(text)) is not None


def done_action(text: str) -> str | None:
    """The sentence in which the assistant reports a task done ("已为您预订301会议室。"), else None."""
    sentence: str
    for sentence in _SENTENCE.findall(text):
        stripped = sentence.strip()
        if stripped and _DONE.search(normalise(stripped)):
            return stripped
    return None


def is_cancel(text: str) -> bool:
    return _CANCEL.search(normalise(text)) is not None
