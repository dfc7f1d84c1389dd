"""What a fact is about, as the conflict rules need it: the identifiers that name a thing, and the slot a
person's fact fills.

Two facts that name different identifiers (order 3F9A0C21DE, order 7B2E11F0AA) are two things however
alike their wording; two facts that fill the same slot of the same holder with different values ("the
user lives in Lisbon", "the user moved and now lives in Porto") are two versions of one. A slot is
(holder, name): the holder is whose fact it is ("self" for the memory's subject, else the relation or
name before the verb: "sister", "sister anna", "小王"), the name is what the fact says of them
("residence", "employer", "phone", "favourite:colour", "relation:spouse").

Only single-valued slots are recognised: a person lives in one place and has one phone number, but
likes many foods and has many friends, so "likes" and "friend" fill no slot. Everything here is regular
expressions without nested repetition over at most the first `MAX_FACT_CHARS` characters: linear in the
text, and a fact is a sentence or two.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from hindsight_server.domain.language import CHINESE, language
from hindsight_server.domain.lexical import ENGLISH_STOPWORDS, query_terms
from hindsight_server.domain.numerals import ZH_NUMBER, parse_number

__all__ = [
    "MAX_FACT_CHARS",
    "Preference",
    "Slot",
    "common_ends",
    "fold",
    "has_update_cue",
    "identifiers",
    "measures",
    "names",
    "preference",
    "relations",
    "slots",
    "speaks_of_self",
    "swapped",
    "topic_terms",
]

# Facts are sentences: the rules read this much of a content and no more (a 16 KB memory is a document,
# and its first lines say what it is about).
MAX_FACT_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class Slot:
    holder: str  # "self", or who else the fact is about
    name: str  # what it says of them: "residence", "favourite:colour", ...
    value: str  # normalised: case folded, articles and surrounding punctuation dropped
    negated: bool = False  # "no longer lives in Lisbon", "不再住在上海": the slot held `value`, not now

    @property
    def key(self) -> tuple[str, str]:
        return self.holder, self.name


def _clean(text: str) -> str:
    return unicodedata.normalize("NFKC", text[:MAX_FACT_CHARS])


# --- identifiers ---------------------------------------------------------------------------------------

# A code: letters and digits mixed, five or more (3F9A0C21DE, TP1234X, A-77B21). ASCII only, so it is
# found inside Chinese text too.
_CODE = re.compile(
    r"(?<![A-Za-z0-9])(?=[A-Za-z0-9-]*[0-9])(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9-]{4,}"
)
_EN_IDENTITY = re.compile(
    r"\b(?:order|booking|ticket|reservation|invoice|account|case|tracking|confirmation|reference|policy|"
    r"parcel|package|shipment|claim|contract|membership|flight)s?\s*(?:number|no\.?|id|code|#)?\s*[:#]?\s*"
    r"([A-Za-z0-9][A-Za-z0-9-]{2,})",
    re.IGNORECASE,
)
_ZH_IDENTITY = re.compile(
    r"(?:订单|单号|工单|票号|账号|账户|预订|编号|运单|快递单|发票|保单|合同|会员)(?:号码|"
    r"号)?\s*(?:是|为|:)?\s*"
    r"([A-Za-z0-9][A-Za-z0-9-]{2,})"
)
_TICKET = re.compile(r"#\s?([0-9]{3,})")
# A quantity is not a code: 500mg, 1000mg, 16GB, 5km, 10am.
_QUANTITY = re.compile(
    r"[0-9]+(?:[.,][0-9]+)?(?:mg|mcg|ml|l|g|kg|km|mi|mb|gb|tb|k|m|lbs?|cm|mm|am|pm|hrs?|h|mins?|s|x|th|st|nd|rd|"
    r"mah|w|kw|kwh|v|hz|ghz|mhz|fps|p|yo|iu)",
    re.IGNORECASE,
)


def identifiers(text: str) -> frozenset[str]:
    """The identifiers a content names, case folded: codes that mix letters and digits, numbers after a
    word that names a thing (order 12345, 订单号 88231), and #-numbers (#4521). A slot's value (a phone
    number) is not an identifier: see `slots`."""
    clean = _clean(text)
    found = {match.group(0) for match in _CODE.finditer(clean) if not _QUANTITY.fullmatch(match.group(0))}
    for pattern in (_EN_IDENTITY, _ZH_IDENTITY):
        found.update(m.group(1) for m in pattern.finditer(clean) if any(c.isdigit() for c in m.group(1)))
    found.update(m.group(1) for m in _TICKET.finditer(clean))
    return frozenset(token.strip("-").casefold() for token in found)


# --- update cues ---------------------------------------------------------------------------------------

# Words that say a fact changed. Strong ones ("switched", "换了") say so on their own; weak ones
# ("now", "现在", "new") also open restatements ("the user is currently studying Japanese").
_EN_CHANGE = (
    r"moved|moving|changed|changes|switched|switching|no longer|not any ?more|anymore|any more|instead|"
    r"became|updated|rescheduled|postponed|pushed back|brought forward|replaced|renamed|from now on|quit|"
    r"stopped|left(?! (?:arm|hand|side|leg|eye|ear|foot|knee|shoulder|hip|lane|turn|wing))|"
    r"cancell?ed|closed|sold|transferred|promoted|broke up|divorced|retired|turned|finally|"
    r"got (?:married|engaged|hired|promoted|divorced|fired|laid off|a new)|started|starting|began|traded|"
    r"ported|pushed|going forward|passed away|died|ended|split up|separated|doubled|halved|"
    r"increased|decreased|raised|lowered|reduced|"
    r"downgraded|returned|return to|gave up|gave away|signed a lease|done with|update|"
    r"switch(?!(?:es|ed)? (?:on|off))|"
    r"graduated|accepted an offer|dropped|bumped|is off|called off|no more|reorg|reorgani[sz]\w*|"
    r"restructur\w*|relocat\w*|rehom\w*|overtaken|took over|taken over|handed over|handed off|joined|"
    r"signed up|first day|last day|disconnected|out of service|went back to|back to|now that|"
    r"from (?:this|next) (?:term|semester|year|month|week|season|quarter)|starting (?:this|next)|as of|"
    r"effective|downsized|renewed|at renewal|cut back|cut down|took up|taking up|from here on|for good|gone|"
    r"slipped|extended|extension|upgrad\w*|migrat\w*|moved over|raise|pay rise|pay cut|reached|"
    r"qualified for|requalified|uninstall\w*|went up|went down|goes up|goes down|upped|down to|cut to|"
    r"trimmed|rebook\w*|refinanc\w*|decided against|"
    r"correction|pushing|push(?:ed)? (?:[\w-]+ ){0,3}to|reassigned|redirect\w*|dropping|"
    r"put (?:[\w-]+ ){0,3}up to|"
    r"corrected|from (?:next )?(?:january|february|march|april|may|june|july|august|september|october|"
    r"november|december)"
)
_EN_WEAK = r"now|new|currently|these days|nowadays|latest|become|again|since|lately|recently|right now"
_ZH_CHANGE = (
    r"改成|改为|改到|改在|改期|改了|改喝|改用|换成|换了|换到|换号|换车|搬(?!砖)|不再|变成|(?<![点时0-9])以后|推迟|提前|延期|已经不|离职|"
    r"辞职|转学|转专业|转岗|调到|调走|分手|卖了|退休(?![后老工金教干职人医])|涨|戒|不(?!然|了)[^，,。；;！!]{0,4}了|没有.{0,6}了|跳槽|订婚|结婚了|离婚|"
    r"升职|升为|升到|升了|升初中|升高中|转到|转去|转网|携号|评上|调整|取消|转掉|(?<!推)送给|送人|去世|(?<![点分0-9:：])开始|停了|"
    r"领证|改签|退租|升[大中小]班|"
    r"毕业了|入职|放弃|(?<!呼吸)暂停|走丢|丢了|死了|分了|调薪|降薪|加到|减到|降到|今后|接来|接过来|没续|不续|"
    r"到期了|结束了|走了|加量|减量|停药|掉到|掉回|销了|辞了|调去|删了|卸载|调成|更正|纠正|说错了|涨到|升级|降级|砍到|"
    r"退掉|退了|注销|销户|推到|延到|延后|迁到|迁移|迁了|转用|不用了|停用|报到|上岗|接任|接手|续保|转投|裸辞|"
    r"(?:月|周|年|学期|季度)起|从.{1,6}起|"
    r"(?<!交)换(?!轮胎|胎|机油|油|滤芯|电池|季)|(?<![修批])改(?![善进革作卷稿造装建])"
)
_ZH_WEAK = r"现在|目前|如今|新的|新号|最新|原来|旧|最近|近来|这阵子|这学期|了(?=[，,。；;！!]|$)"
_EN_STRONG_CUE = re.compile(rf"\b(?:{_EN_CHANGE})\b", re.IGNORECASE)
_EN_CUE = re.compile(rf"\b(?:{_EN_CHANGE}|{_EN_WEAK})\b", re.IGNORECASE)
_ZH_STRONG_CUE = re.compile(_ZH_CHANGE)
_ZH_CUE = re.compile(rf"{_ZH_CHANGE}|{_ZH_WEAK}")
# A preference is exclusive by its meaning: preferring Excel replaces preferring CSV.
_EN_PREFERS = re.compile(r"\b(?:prefers?|preferred|preferring|rather)\b", re.IGNORECASE)
_ZH_PREFERS = re.compile(r"偏好|更喜欢|更爱|习惯用|宁愿")


def has_update_cue(text: str, *, strong: bool = False) -> bool:
    """Whether a content reads as a change of something known ("now", "moved", "改成", "不再"), or
    as a preference, which one value replaces. `strong`: only words that say so on their own
    ("switched", "换了"), not "now" or "new", and not a preference."""
    clean = _clean(text).replace("啦", "了")  # spoken 啦 is 了: "不跑啦", "换啦"
    if strong:
        chinese = language(clean) == CHINESE
        return bool((chinese and _ZH_STRONG_CUE.search(clean)) or _EN_STRONG_CUE.search(clean))
    if language(clean) == CHINESE:
        return bool(_ZH_CUE.search(clean) or _ZH_PREFERS.search(clean) or _EN_CUE.search(clean))
    return bool(_EN_CUE.search(clean) or _EN_PREFERS.search(clean))


# --- slots: English --------------------------------------------------------------------------------------

# What a slot's value runs to: the first of these, or punctuation.
_EN_STOP = (
    r"now|since|with|and|but|because|for|as|from|until|till|next|last|this|these|when|where|while|after|"
    r"before|which|who|that|so|anymore|any more|again|too|also|currently|today|yesterday|tomorrow|instead|"
    r"at the moment|these days|nowadays|full[- ]time|part[- ]time|on|in|at|by|near|to"
)
_EN_VALUE = rf"(?P<value>(?:(?!\b(?:{_EN_STOP})\b)[^.,;:!?()\n])+)"
_EN_VALUE_TO_END = r"(?P<value>[^,;!?()\n]+?)(?=[.,;!?()\n]|$)"
_ARTICLES = re.compile(r"^(?:the|a|an|my|his|her|their|our|your|its)\s+", re.IGNORECASE)

_EN_RELATIONS = {
    "wife": "spouse", "husband": "spouse", "spouse": "spouse", "partner": "partner",
    "girlfriend": "partner", "boyfriend": "partner", "fiancee": "partner", "fiance": "partner",
    "fiancée": "partner", "fiancé": "partner", "mother": "mother", "mom": "mother", "mum": "mother",
    "father": "father", "dad": "father", "boss": "boss", "manager": "boss", "landlord": "landlord",
    "doctor": "doctor", "dentist": "dentist",
}  # fmt: skip
# Whose fact it is when it is not the subject's own: the last of these before the verb.
_EN_HOLDERS = (
    "wife|husband|spouse|partner|girlfriend|boyfriend|fiancee|fiance|mother|mom|mum|father|dad|parents|"
    "brother|sister|son|daughter|kids?|children|child|baby|friend|boss|manager|colleague|coworker|"
    "roommate|flatmate|neighbou?r|cousin|aunt|uncle|niece|nephew|grandmother|grandfather|grandma|grandpa|"
    "grandparents|team|company|dog|cat|puppy|kitten|pet|landlord|doctor|dentist|teacher|"
    # groups hold facts of their own only when said to ("the band's account", not "favourite band")
    "band(?='s)|club(?='s)|business(?='s)|shop(?='s)|studio(?='s)|agency(?='s)"
)
# An in-law is another person than the relation it names ("mother-in-law" is not "mother").
_EN_HOLDER = re.compile(rf"\b((?:{_EN_HOLDERS})(?:-in-law)?)(?:'s)?(?:\s+([A-Z][a-z]+))?\b", re.IGNORECASE)
_EN_SELF = {"the", "user", "i", "he", "she", "they", "we", "my", "me", "his", "her", "their", "our", "it"}
# A capitalised word that opens a sentence without naming anyone ("These days the user ...").
_EN_NOT_NAMES = _EN_SELF | ENGLISH_STOPWORDS | {"today", "yesterday", "recently", "lately", "now", "user's"}
_EN_NAME = re.compile(r"\s*([A-Z][a-z]+)\b")
_EN_CLAUSE = re.compile(r"[.,;:!?()]|\b(?:and|but|so|then|because|after|before|while)\b")
_EN_NEGATION = re.compile(
    r"\b(?:no longer|not any ?more|doesn't|does not|don't|do not|isn't|is not|stopped|never|not)\b",
    re.IGNORECASE,
)

_V = _EN_VALUE
_EN_MOVER = (
    rf"(?P<mover>\b(?:user|i|i'm|we|we're|he|he's|she|she's|they|they're|family|{_EN_HOLDERS})"
    r"|\b(?-i:[A-Z][a-z]+))"
)
_EN_SLOTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        # Moved, of a person ("the review moved to Friday" is a schedule): right after who moved.
        ("residence", rf"{_EN_MOVER}\s+(?:(?:has|have|had|just|finally|recently|then|also|now|and)\s+)*"
            rf"(?:moved|moving|relocated|relocating|moves)\s+(?:back\s+)?(?:from\s+[^,.;]+?\s+)?to\s+"
            rf"(?:live\s+in\s+)?{_V}"),
        ("residence", rf"\b(?:lives?|living|lived|resides?|residing|settled|stays?|staying)\s+(?:now\s+|"
            rf"currently\s+)?in\s+{_V}"),
        ("residence", rf"\b(?:is|are)\s+(?:now\s+)?based\s+in\s+{_V}"),
        # A home address; an office, shipping or e-mail address is another slot.
        ("residence", rf"\b(?<!office )(?<!work )(?<!business )(?<!billing )(?<!shipping )(?<!delivery )"
            rf"(?<!mailing )(?<!e-mail )(?<!email )(?<!ip )(?<!web )(?:home|address|hometown)\s+(?:is|was)\s+"
            rf"(?:now\s+)?(?:in\s+)?{_EN_VALUE_TO_END}"),
        ("employer", rf"\b(?:works?|working|worked|employed|interns?|interning)\s+(?:now\s+)?(?:at|for|"
            rf"by)\s+{_V}"),
        ("employer", rf"\b(?:joined|joining|hired by|got a job at|new job at|started at|job is at)\s+{_V}"),
        ("employer", rf"\b(?:employer|company)\s+is\s+(?:now\s+)?{_V}"),
        ("job", rf"\b(?:works?|working)\s+(?:now\s+)?as\s+{_V}"),
        ("job", rf"\b(?:job|job title|profession|occupation|role|position)\s+is\s+(?:now\s+)?{_V}"),
        ("job", rf"\b(?:became|becomes|is now|was promoted to)\s+(?:a|an)\s+{_V}"),
        ("school", rf"\b(?:studies|studying|studied|enrolled|"
            rf"student)(?:\s+[a-z]+){{0,3}}?\s+(?:now\s+)?at\s+{_V}"),
        ("school", rf"\b(?:enrolled|student)\s+in\s+{_V}"),
        ("school", rf"\b(?:goes to|attends|attending|transferred to)\s+{_V}\s+(?:university|college|"
            rf"school)\b"),
        ("school", rf"\b(?:university|college|school)\s+is\s+(?:now\s+)?{_V}"),
        ("major", rf"\b(?:majors?|majoring)\s+in\s+{_V}"),
        ("major", rf"\bmajor\s+is\s+(?:now\s+)?{_V}"),
        ("phone", r"\b(?:(?:phone|mobile|cell|telephone)(?:\s+number)?|new\s+number)(?:\s*(?:is|was|to|:|now|"
            r"changed))*\s*(?P<value>\+?[0-9][0-9 ().-]{5,}[0-9])"),
        ("diet", r"(?:\bis|\bam|\bare|'m|'re|\bbecame|\bbecome|\bwent|\bgone|"
            r"\bturned)\s+(?:now\s+)?(?:a\s+|fully\s+|strictly\s+)?(?P<value>vegetarian|vegan|"
                r"pescatarian|keto|gluten[- ]free|lactose[- ]free|halal|kosher|omnivore)\b"),
        ("diet", r"\b(?:diet|eats)\s+(?:is\s+)?(?P<value>vegetarian|vegan|pescatarian|keto|"
            r"gluten[- ]free|meat|everything)\b"),
        ("vehicle", rf"\b(?:drives|driving|drove)\s+(?:a|an|the)\s+{_V}"),
        ("vehicle", rf"\b(?:car|vehicle|motorbike|motorcycle)\s+is\s+(?:now\s+)?(?:a|an)\s+{_V}"),
        ("vehicle", rf"\bbought\s+(?:a|an)\s+(?:new\s+)?(?:car|motorbike|motorcycle)\s*[:,-]?\s*(?:a|"
            rf"an)?\s*{_V}"),
        ("bank", rf"\b(?:banks?\s+with|bank\s+is|bank\s+account\s+is\s+(?:at|with))\s+(?:now\s+)?{_V}"),
        ("username", rf"\b(?:username|user name|handle|login)\s+is\s+(?:now\s+)?{_EN_VALUE_TO_END}"),
    )
)  # fmt: skip
# A recurring or planned slot of time, named by what it is for: "the yoga class is on Tuesdays", "the
# weekly standup moved to 9:30". Only when the activity stands right before the verb ("the meeting with
# Anna is on Monday" names a meeting, not the meeting).
_EN_ACTIVITY = (
    r"(?<![\w'])(?P<what>(?:[a-z]+\s+){0,2}?(?:class|classes|lesson|lessons|meeting|standup|stand-up|appointment|"
    r"session|practice|training|shift|rehearsal|check-in|checkup|check-up|1:1|one-on-one|deadline))"
)
_EN_WHEN_PREFIX = re.compile(r"^(?:on|at|by|every|for)\s+")
_EN_SCHEDULE = re.compile(
    rf"\b{_EN_ACTIVITY}\s+(?:(?:is|are|was|has been|got|was)\s+)?(?:now\s+)?"
    rf"(?:(?:moved|rescheduled|changed|pushed|pushed back|postponed|brought forward)\s+"
    rf"(?:from\s+[^,.;]+?\s+)?to"
    rf"|(?:is|are)\s+(?:now\s+)?(?:on|at|every|due)|(?:is|are)\s+(?:now\s+)?due\s+(?:on|by))\s+"
    rf"{_EN_VALUE_TO_END}",
    re.IGNORECASE,
)
_EN_FAVOURITE = re.compile(
    rf"\bfavou?rite\s+(?P<what>[a-z]+(?:\s+[a-z]+)?)\s+(?:(?:these days|nowadays|now)\s+)?(?:is|are|was)\s+"
    rf"(?:now\s+)?{_EN_VALUE_TO_END}",
    re.IGNORECASE,
)
_EN_RELATION = re.compile(
    r"(?<!skip-level )(?<!former )(?<!ex-)(?<!previous )(?<!old )"
    r"\b(?P<rel>wife|husband|spouse|partner|girlfriend|boyfriend|fiancee|fiance|mother|mom|mum|father|dad|"
    r"boss|manager|landlord|doctor|dentist)(?:'s\s+name)?\s+(?:is|was)\s+(?:now\s+)?(?:called\s+|named\s+)?"
    r"(?P<value>[A-Z][\w.-]*(?:\s+[A-Z][\w.-]*)?)"
)
_EN_MARRIED = re.compile(
    r"\b(?:married to|engaged to|dating|is seeing)\s+(?P<value>[A-Z][\w-]*(?:\s+[A-Z][\w-]*)?)"
)
_EMAIL = re.compile(r"(?P<value>[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,190}\.[A-Za-z]{2,24})")


# A person has a work address and a personal one, a home phone and a work phone: which, when the fact
# says so. The kind stands right before the slot's word ("work e-mail", "家里的电话").
_EN_KIND = re.compile(
    r"\b(work|office|business|personal|private|home|school|landline)\s+(?:e-?mail|phone|number|line|cell|mobile)",
    re.IGNORECASE,
)
_ZH_KIND = re.compile(r"(工作|公司|办公室?|私人|个人|学校|家里|家庭|座机)的?(?:邮箱|手机|电话)")
_KINDS = {
    "office": "work", "business": "work", "private": "personal", "工作": "work", "公司": "work",
    "办公室": "work", "办公": "work",
    "私人": "personal", "个人": "personal", "学校": "school", "家里": "home",
    "家庭": "home", "座机": "home", "landline": "home",
}  # fmt: skip


def _kind_slot(name: str, prefix: str) -> str:
    """`name` ("email", "phone") qualified by the kind the words before its value name, if any."""
    found = list(_EN_KIND.finditer(prefix[-40:])) or list(_ZH_KIND.finditer(prefix[-12:]))
    if not found:
        return name
    word = found[-1].group(1).casefold()
    return f"{name}:{_KINDS.get(word, word)}"


def _en_holder(prefix: str) -> str:
    """Whose fact: the last holder word before the verb (with a name right after it), else a name
    that opens the verb's clause ("Caroline lives in Boston"), else the subject itself."""
    found = list(_EN_HOLDER.finditer(prefix))
    if found:
        last = found[-1]
        relation = last.group(1).casefold()
        return f"{relation} {last.group(2).casefold()}" if last.group(2) else relation
    clause = _EN_CLAUSE.split(prefix)[-1]
    opening = _EN_NAME.match(clause)
    if opening is None or opening.group(1).casefold() in _EN_NOT_NAMES:
        return "self"
    return opening.group(1).casefold()


def _value(raw: str) -> str:
    value = _ARTICLES.sub("", raw.strip(" \t'\"“”‘’.-")).strip()
    value = re.sub(r"\s+(?:now|again|too|as well)$", "", value, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", value).casefold()


def _phone(raw: str) -> str:
    return re.sub(r"[^0-9+]", "", raw)


def _english_slots(text: str) -> list[Slot]:
    found: dict[tuple[str, str], Slot] = {}

    def add(holder: str, name: str, value: str, start: int) -> None:
        if not value or (holder, name) in found:
            return
        # Only a negation in the verb's own clause: "left Google and now works at Microsoft" is not one.
        clause = _EN_CLAUSE.split(text[max(0, start - 40) : start])[-1]
        negated = bool(_EN_NEGATION.search(clause))
        found[(holder, name)] = Slot(holder, name, value, negated)

    for name, pattern in _EN_SLOTS:
        for match in pattern.finditer(text):
            raw = match.group("value")
            value = _phone(raw) if name == "phone" else _value(raw)
            slot = _kind_slot(name, text[: match.start("value")]) if name == "phone" else name
            if name == "diet":
                value = value.replace(" ", "-")
            # Who moved is part of the match: the holder is read up to the verb.
            verb_at = match.end("mover") if "mover" in pattern.groupindex else match.start()
            add(_en_holder(text[:verb_at]), slot, value, match.start())
    for match in _EN_SCHEDULE.finditer(text):
        what = _value(match.group("what"))
        when = _EN_WHEN_PREFIX.sub("", _value(match.group("value")))
        add(_en_holder(text[: match.start()]), f"schedule:{what}", when, match.start())
    for match in _EN_FAVOURITE.finditer(text):
        what = _value(match.group("what")).replace("colour", "color")
        add(
            _en_holder(text[: match.start()]),
            f"favourite:{what}",
            _value(match.group("value")),
            match.start(),
        )
    for match in _EN_RELATION.finditer(text):
        relation = _EN_RELATIONS[match.group("rel").casefold()]
        add(
            _en_holder(text[: match.start()]),
            f"relation:{relation}",
            _value(match.group("value")),
            match.start(),
        )
    for match in _EN_MARRIED.finditer(text):
        add(_en_holder(text[: match.start()]), "relation:spouse", _value(match.group("value")), match.start())
    for match in _EMAIL.finditer(text):
        add(
            _en_holder(text[: match.start()]),
            _kind_slot("email", text[: match.start()]),
            match.group("value").casefold(),
            match.start(),
        )
    return list(found.values())


# --- slots: Chinese --------------------------------------------------------------------------------------

_ZH_STOP = (
    r"[，,。.；;！!？?、（(）)\s]|现在|目前|已经|了|和|跟|与|并|而|但|因为|所以|工作|上班|读书|上学|的时候"
)
_ZH_VALUE = rf"(?P<value>(?:(?!{_ZH_STOP}).){{1,16}})"
_ZH_RELATIONS = {
    "妻子": "spouse", "老婆": "spouse", "太太": "spouse", "丈夫": "spouse", "老公": "spouse",
    "爱人": "spouse", "先生": "spouse", "女朋友": "partner", "男朋友": "partner", "对象": "partner",
    "未婚妻": "partner", "未婚夫": "partner", "妈妈": "mother", "母亲": "mother", "爸爸": "father",
    "父亲": "father", "老板": "boss", "领导": "boss", "上司": "boss", "经理": "boss", "房东": "landlord",
}  # fmt: skip
_ZH_HOLDERS = (
    "未婚妻|未婚夫|女朋友|男朋友|妻子|老婆|太太|丈夫|老公|爱人|对象|妈妈|母亲|爸爸|父亲|父母|哥哥|弟弟|姐姐|"
    "妹妹|儿子|女儿|孩子|朋友|妈|爸|同事|同学|室友|邻居|老板|领导|上司|经理|房东|爷爷|奶奶|外公|外婆|叔叔|阿姨|"
    "表哥|表姐|表弟|表妹|堂哥|堂姐|堂弟|堂妹|姑姑|姑妈|姑父|舅舅|舅妈|姨妈|小姨|姨父|伯伯|伯母|婶婶|岳父|岳母|公公|"
    "婆婆|嫂子|姐夫|妹夫|弟媳|侄子|侄女|外甥|外甥女|孙子|孙女|闺女|公司|团队|狗|猫|(?<=我)[哥姐弟妹]|"
    "大宝|二宝|三宝|老大|老二|老三|大儿子|小儿子|大女儿|小女儿"
)
_ZH_HOLDER = re.compile(_ZH_HOLDERS)
# What a plain subject is written as: its removal leaves nothing when the fact is the subject's own.
_ZH_SELF = re.compile(
    r"用户|我们|我|他们|她们|他|她|它|本人|自己|现在|目前|如今|已经|刚刚|刚|最近|之前|以前|后来|也|"
    r"还|都|就|又|的|了|"
    r"[上下这本前去今明后]?个?(?:年|月|周|星期|礼拜|天)(?:前|后)?|\s"
)
_ZH_SELF_FIRST = re.compile(r"\s*(?:用户|我|他|她|它|本人)")
_ZH_CLAUSE = re.compile(r"[，,。.；;！!？?]")
_ZH_NEGATION = re.compile(r"不再|不|没有|没|已经不|辞职|离开")

_ZV = _ZH_VALUE
_ZH_SLOTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("residence", r"(?:搬到了?|搬去了?|搬回了?|搬家到|迁到|定居(?:在|于)?|住在|居住在|住到了?|"
            rf"家在|安家在|落户)\s*{_ZV}"),
        ("residence", r"(?<!公司)(?<!单位)(?<!办公)(?<!收货)(?<!发货)(?<!快递)(?<!邮箱)(?<!网站)(?:地址|住址)"
            r"(?:是|为|改成|改为|换成)\s*(?P<value>[^，,。；;！!？?\s]{2,40})"),
        ("employer", rf"(?<![住家现正还也])在\s*{_ZV}\s*(?:工作|上班|任职|实习|就职)"),
        ("employer", r"(?:就职于|任职于|供职于|入职了?|跳槽到了?|跳槽去了?|加入了?|"
            rf"受雇于)\s*{_ZV}\s*(?:工作|上班|公司)?"),
        ("employer", rf"(?:公司|单位|雇主)(?:是|为|换成了?|改成了?)\s*{_ZV}"),
        ("job", rf"(?:职业|工作|职位|岗位|职务)(?:是|为|换成了?|改成了?)\s*{_ZV}"),
        ("job", rf"(?:是一名|是一位|当了?一名|成为了?一名|做了?一名|升职为|升为)\s*{_ZV}"),
        ("school", rf"(?<![住家现正还也])在\s*{_ZV}\s*(?:读书|上学|读大学|读研|读博|念书|读高中|"
            r"读初中|上大学)"),
        ("school", rf"(?:就读于|考上了?|转学到了?|被)\s*{_ZV}(?:录取)?"),
        ("major", rf"(?:专业)(?:是|为|换成了?|改成了?)\s*{_ZV}"),
        ("major", rf"(?:学的是|主修|读的是)\s*{_ZV}(?:专业)?"),
        ("phone", r"(?:电话|手机|手机号|手机号码|电话号码|联系方式)(?:是|为|改成了?|换成了?|"
            r":)?\s*(?P<value>\+?[0-9][0-9 -]{5,}[0-9])"),
        ("diet", r"(?P<value>吃素|素食|纯素|全素|不吃肉|生酮|清真)"),
        ("vehicle", rf"(?:开(?:一辆|的是|着一辆)|车是|座驾是|买了一辆(?:新的?)?|换了一辆(?:新的?)?)\s*{_ZV}"),
        ("bank", rf"(?:银行是|开户行是)\s*{_ZV}"),
        ("bank", rf"(?<![住家现正还也])在\s*{_ZV}\s*(?:开户|办卡|开的户)"),
        ("username", r"(?:用户名|账号名|昵称)(?:是|为|改成了?|"
            r"换成了?)\s*(?P<value>[^，,。；;！!？?\s]{1,40})"),
    )
)  # fmt: skip
_ZH_WHEN = (
    r"(?P<value>(?:每)?(?:周|星期|礼拜)[一二三四五六日天](?:[上下]午|晚上|早上)?(?:[0-9一二三四五六七八九十]+点半?)?"
    r"|(?:[上下]午|晚上|早上)?[0-9一二三四五六七八九十]+点半?|[0-9]+[:：][0-9]+|[0-9]+月[0-9]+[日号])"
)
_ZH_SCHEDULE = re.compile(
    rf"(?:(?<=的)|(?<=^)|(?<=[，,。；;\s])|(?<=用户)|(?<=我))"
    rf"(?P<what>[\u4e00-\u9fff]{{0,4}}?(?:课|例会|会议|周会|晨会|训练|排练|门诊|复诊|值班|面试|截止日期|截止时间))"
    rf"(?:时间)?(?:从[^，,。；;]{{1,10}}?)?(?:在|是|定在|改到了?|改在|改成了?|调到了?|挪到了?|推迟到了?|提前到了?)\s*{_ZH_WHEN}"
)
_ZH_FAVOURITE = re.compile(
    rf"最喜欢(?:吃|喝|看|听|玩|用|穿|去)?的\s*(?P<what>[^，,。；;！!？?\s是]{{1,6}}?)\s*(?:现在|目前|已经)?\s*(?:是|变成了?|"
    rf"换成了?)\s*{_ZV}"
)
_ZH_RELATION = re.compile(
    r"(?P<rel>未婚妻|未婚夫|女朋友|男朋友|妻子|老婆|太太|丈夫|老公|爱人|对象|妈妈|母亲|爸爸|父亲|"
    r"老板|领导|上司|经理|房东)"
    rf"(?:的名字)?(?:现在)?(?:叫做|叫|名叫|是|换成了?|改成了?|变成了?)\s*{_ZV}"
)
_ZH_MARRIED = re.compile(
    r"(?:和|跟|与)\s*(?P<value>[^，,。；;！!？?\s和跟与]{1,8}?)\s*(?:结婚|订婚|在一起|谈恋爱)"
)


_ZH_VALUE_FILLER = re.compile(
    r"^(?:[一两这那]?[辆台部个只件套家所])|的|(?<=\w)[市省](?=\w)|(?:那块|那边|那片|一带|附近|这边|那儿|这儿)$"
)


def _zh_holder(prefix: str) -> str:
    """Whose fact: the last holder word in the verb's clause (with a name right after it: 朋友小张),
    else a short name that is the whole clause (小王住在深圳), else the subject itself."""
    clause = _ZH_CLAUSE.split(prefix)[-1]
    found = list(_ZH_HOLDER.finditer(clause))
    if found:
        last = found[-1]
        name = _ZH_SELF.sub("", clause[last.end() :])
        return last.group(0) + name if 2 <= len(name) <= 3 else last.group(0)
    if _ZH_SELF_FIRST.match(clause):
        return "self"
    rest = _ZH_SELF.sub("", clause).strip()
    return rest if 2 <= len(rest) <= 3 and clause.startswith(rest) else "self"


def _zh_phone_holder(prefix: str) -> str:
    """Whose number: as `_zh_holder`, and also a thing named right before it ("物业电话", "前台电话": the
    estate office's, the front desk's); a number that opens its clause is of whom the clause before
    named ("紧急联系人是他爸，电话…": the father's)."""
    clauses = _ZH_CLAUSE.split(prefix)
    rest = _ZH_SELF.sub("", clauses[-1])
    if not rest and len(clauses) > 1:
        holder = _zh_holder("".join(clauses[-2:]))
        return holder if holder != "self" else _zh_holder(prefix)
    holder = _zh_holder(prefix)
    rest = rest.strip()
    return rest if holder == "self" and len(rest) >= 2 and not _ZH_SELF_FIRST.match(clauses[-1]) else holder


def _chinese_slots(text: str) -> list[Slot]:
    found: dict[tuple[str, str], Slot] = {}

    def add(holder: str, name: str, value: str, start: int) -> None:
        # "一辆白色的特斯拉" is "白色特斯拉", "深圳市" is "深圳": a measure word, 的 and an administrative
        # suffix say nothing of the value.
        value = _ZH_VALUE_FILLER.sub("", value.strip().casefold())
        if not value or (holder, name) in found:
            return
        negated = bool(_ZH_NEGATION.search(_ZH_CLAUSE.split(text[max(0, start - 6) : start])[-1]))
        found[(holder, name)] = Slot(holder, name, value, negated)

    diets = {
        "吃素": "vegetarian",
        "素食": "vegetarian",
        "不吃肉": "vegetarian",
        "纯素": "vegan",
        "全素": "vegan",
    }
    for name, pattern in _ZH_SLOTS:
        for match in pattern.finditer(text):
            value = match.group("value")
            slot = name
            if name == "phone":
                value = _phone(value)
                slot = _kind_slot(name, text[: match.start("value")])
            elif name == "diet":
                value = diets.get(value, value)
            # A verb's leftovers are not a holder: "用户不再" is the subject, negated.
            before = _ZH_NEGATION.sub("", text[: match.start()])
            holder = _zh_phone_holder(before) if name == "phone" else _zh_holder(before)
            add(holder, slot, value, match.start())
    for match in _ZH_SCHEDULE.finditer(text):
        what = _ZH_SELF.sub("", match.group("what")) or match.group("what")
        add(_zh_holder(text[: match.start()]), f"schedule:{what}", match.group("value"), match.start())
    for match in _ZH_FAVOURITE.finditer(text):
        add(
            _zh_holder(text[: match.start()]),
            f"favourite:{match.group('what')}",
            match.group("value"),
            match.start(),
        )
    for match in _ZH_RELATION.finditer(text):
        relation = _ZH_RELATIONS[match.group("rel")]
        add(_zh_holder(text[: match.start()]), f"relation:{relation}", match.group("value"), match.start())
    for match in _ZH_MARRIED.finditer(text):
        add(_zh_holder(text[: match.start()]), "relation:spouse", match.group("value"), match.start())
    for match in _EMAIL.finditer(text):
        add(
            _zh_holder(text[: match.start()]),
            _kind_slot("email", text[: match.start()]),
            match.group("value").casefold(),
            match.start(),
        )
    return list(found.values())


def slots(text: str) -> tuple[Slot, ...]:
    """The single-valued slots a fact fills, one per (holder, name), the first mention winning."""
    clean = _clean(text)
    found = _chinese_slots(clean) if language(clean) == CHINESE else _english_slots(clean)
    return tuple(found)


# --- preferences -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preference:
    """A preference statement split at its verb: who prefers (`holder`) and what (`words`, its
    object and context, normalised: cue words and punctuation dropped; words in English, characters
    in Chinese)."""

    holder: str
    words: tuple[str, ...]


_EN_PREFER_VERB = re.compile(r"\b(?:prefers?|preferred|preferring|would rather|'d rather)\b", re.IGNORECASE)
_ZH_PREFER_VERB = re.compile(r"偏好|更喜欢|更爱|习惯用|宁愿")
_EN_FILLER = re.compile(r"\b(?:now|instead|these days|nowadays|again|really|still|always|the|a|an)\b|[^\w\s]")
_PLURAL = re.compile(r"(?<=[a-z]{3})s$")
_ZH_FILLER = re.compile(r"现在|目前|如今|改为|改成|换成|还是|了|的|[^\w]")


def preference(text: str) -> Preference | None:
    """The preference a content states ("the user prefers tea in the morning", "用户偏好CSV格式导出"),
    or None."""
    clean = _clean(text)
    if language(clean) == CHINESE:
        verb = _ZH_PREFER_VERB.search(clean)
        if verb is None:
            return None
        rest = _ZH_CLAUSE.split(clean[verb.end() :])[0]
        return Preference(_zh_holder(clean[: verb.start()]), tuple(_ZH_FILLER.sub("", rest.casefold())))
    verb = _EN_PREFER_VERB.search(clean)
    if verb is None:
        return None
    rest = re.split(r"[.;!?]", clean[verb.end() :])[0]
    # Plurals folded: "in the mornings" is "in the morning".
    words = [_PLURAL.sub("", word) for word in _EN_FILLER.sub(" ", rest.casefold()).split()]
    return Preference(_en_holder(clean[: verb.start()]), tuple(words))


# --- who else a fact names, and what it is about ---------------------------------------------------------

_NOT_PEOPLE = frozenset(
    {"dog", "cat", "puppy", "kitten", "pet", "company", "team", "狗", "猫", "公司", "团队"}
)
_SELF_TERMS = frozenset({"user", "users", "用户", "户的", "我的", "的用", "i"})


# One name per relation, so "mom" and "mother", "妈" and "妈妈" are the same person.
_SAME_RELATION = {
    "mom": "mother", "mum": "mother", "妈": "mother", "妈妈": "mother", "母亲": "mother",
    "dad": "father", "爸": "father", "爸爸": "father", "父亲": "father", "wife": "spouse",
    "husband": "spouse", "spouse": "spouse", "妻子": "spouse", "老婆": "spouse", "太太": "spouse",
    "丈夫": "spouse", "老公": "spouse", "爱人": "spouse", "kid": "child", "kids": "child",
    "children": "child", "child": "child", "孩子": "child", "boss": "boss", "manager": "boss",
    "老板": "boss", "领导": "boss", "上司": "boss", "经理": "boss", "girlfriend": "partner",
    "boyfriend": "partner", "女朋友": "partner", "男朋友": "partner", "对象": "partner",
    "grandma": "grandmother", "grandpa": "grandfather", "闺女": "女儿",
}  # fmt: skip


# Who passed a fact on ("Mom says ...", "俺妈说...") is its source, not whose fact it is.
_EN_SAYS = re.compile(r"\s+(?:says|said|told|tells|mentioned|reports|texted|wrote)\b", re.IGNORECASE)
_ZH_SAYS = re.compile(r"(?:说|讲|告诉|提到|发消息|来电)")
# Who a thing went to ("华为给我妈用了") is not whose fact it is.
_ZH_GIVEN = re.compile(r"(?:给|送给|交给|留给)我?$")
_ZH_GIVEN_USE = re.compile(r"(?:用|了|玩|穿|养|留着|带)")  # "给我妈用了": handed over, not "给阿姨涨到"


def relations(text: str) -> frozenset[str]:
    """The people other than the subject a content names by their relation to it (sister, 老公, boss):
    a fact of the user's sister is not a fact of the user's."""
    return frozenset(_SAME_RELATION.get(word, word) for word in _relation_words(_clean(text)))


def people_terms(text: str) -> frozenset[str]:
    """The content terms (`topic_terms`) of the words that name those people: "sist" of "my sister"."""
    return frozenset(term for word in _relation_words(_clean(text)) for term in topic_terms(word))


def _relation_words(clean: str) -> frozenset[str]:
    if language(clean) == CHINESE:
        found = {
            match.group(0)
            for match in _ZH_HOLDER.finditer(clean)
            if not _ZH_JOB_TITLE.match(clean, max(0, match.start() - 1))
            and not _ZH_SAYS.match(clean, match.end())
            and not (_ZH_GIVEN.search(clean, 0, match.start()) and _ZH_GIVEN_USE.match(clean, match.end()))
        }
    else:
        found = {
            match.group(1).casefold()
            for match in _EN_HOLDER.finditer(clean)
            if (match.group(1).casefold() not in _EN_TITLES or _EN_POSSESSED.search(clean, 0, match.start()))
            and not _EN_SAYS.match(clean, match.end(1))
        }
    return frozenset(found - _NOT_PEOPLE)


_EN_SELF_OPENING = re.compile(
    r"^\W*(?:(?:the\s+)?user\b(?!'s|\s+name)|i\b|i'm\b|i've\b|we\b|we're\b|(?:got|just|finally|recently)\b)",
    re.IGNORECASE,
)
_ZH_SELF_OPENING = re.compile(r"^\W*(?:用户|我)(?![的们家妈爸哥姐弟妹女儿老爱对闺])")


_EN_PRONOUN = re.compile(r"\b(?:he|she|him|his|her|he's|she's)\b", re.IGNORECASE)
_ZH_PRONOUN = re.compile(r"[他她](?!们)")


def _found(text: str, chinese: re.Pattern[str], english: re.Pattern[str]) -> bool:
    """Whether a content's first MAX_FACT_CHARS characters hold its language's pattern."""
    clean = _clean(text)
    return bool((chinese if language(clean) == CHINESE else english).search(clean))


def refers_back(text: str) -> bool:
    """Whether a content speaks of one other person by a pronoun ("she quit", "医生给她换成了"), not by
    who they are: then it may be about the one person an earlier fact named ("my wife ..."). "They" and
    "their" are left out: notes write them for the user."""
    return _found(text, _ZH_PRONOUN, _EN_PRONOUN)


# A one-off exception to a habit ("gym this Friday is at 7pm, just this once") changes nothing lasting.
_EN_ONE_OFF = re.compile(
    r"\b(?:just this once|this time only|only this (?:time|week)|today only|temporarily|this week only)\b",
    re.IGNORECASE,
)
# 临时有事 is "something came up": the reason for a change, not a change for once.
_ZH_ONE_OFF = re.compile(r"就这一次|只这一次|仅此一次|这一次|这次|本次|临时(?!有事|有变|决定)|暂时")
# One day named ("this Friday", "下周一", "今天"): against a habit, an exception to it; against another
# dated plan, possibly its new date.
_EN_DATED = re.compile(
    r"\b(?:just today|just tonight|for today|for tonight|(?<!from )(?<!starting )(?:this|next) "
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?<!from )(?<!starting )(?<!as of )this (?:week|weekend|month))\b",
    re.IGNORECASE,
)
_ZH_DATED = re.compile(r"(?:这|本|下)周[一二三四五六日天](?!起|开始)|今天|今晚")
_EN_MOMENT = re.compile(
    r"\b(?:today|today's|tonight|yesterday|this (?:morning|afternoon|evening)|last night|"
    r"(?:on|last|this past) (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b",
    re.IGNORECASE,
)
_ZH_MOMENT = re.compile(
    r"昨天|昨晚|今早|今晨|早上|晚上|上午|下午|[早午晚]饭后|[早午晚]餐后|[上这]?周[一二三四五六日天]"
)
_EN_TARGET = re.compile(
    r"\b(?:target|goal|aim|aiming|limit|restriction|not allowed|allowed|should (?:stay|be|get)|"
    r"heavier than|no more than|at most|plans? to|planning to|planned)\b",
    re.IGNORECASE,
)
_ZH_TARGET = re.compile(r"目标|控制在|不超过|不能超过|不要超过|争取|要减到|想减到|计划|打算")
_EN_HABIT = re.compile(
    r"\b(?:every|each|daily|weekly|monthly|always|usually|normally|weekdays|weekends|mondays|tuesdays|"
    r"wednesdays|thursdays|fridays|saturdays|sundays|"
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday) "
    r"(?:mornings|afternoons|evenings|nights))\b",
    re.IGNORECASE,
)
_ZH_HABIT = re.compile(r"每|总是|通常|一般|平时|经常")
# Words that add a fact beside the known ones rather than replace one ("also", "还要", "另外").
# "too" ends its clause when it means "also" ("coffee too"); before a word it means "excessively"
# ("too late").
_EN_ADDS = re.compile(
    r"\b(?:also|too(?=\s*(?:[.,;:!?)]|$))|as well|in addition|additionally)\b", re.IGNORECASE
)
_ZH_ADDS = re.compile(
    r"还要|还会|另外|此外|也(?:会|要|在|有|开始|报|是)|又(?:养|买|报|开|办)|还(?:有|放了|买了|养了|开了|办了|报了)"
)


# Starting something ("started swimming", "开始学游泳") adds to a many-valued part of life; it replaces
# only with another change word ("switched", "改成").
_STARTS = re.compile(
    r"\b(?:started|starting|began|took up|taking up|signed up)\b|开始|报了|报名", re.IGNORECASE
)


def replaces(text: str) -> bool:
    """Whether a content says on its own that something changed, beyond starting something new."""
    return has_update_cue(_STARTS.sub(" ", _clean(text)), strong=True)


# A preference said for one situation ("for technical questions", "聊育儿话题时"): another situation's
# preference stands beside it.
_EN_SCOPE = re.compile(
    r"\b(?:when(?:ever)?|while|if)\b\s+(?P<scope>[^,.;!?]+)|"
    r"\bfor\s+(?P<topic>(?:[a-z-]+\s+){0,2}(?:questions?|topics?|tasks?|writing|e-?mails?|code|coding|messages?|"
    r"work|chats?))\b|"
    # "on movie nights", "on school days": an occasion named by a word before it (not "on days now")
    r"\bon\s+(?P<occasion>(?:(?!these\b|those\b|the\b|call\b)[a-z-]+\s+){1,2}(?:nights|days|evenings|mornings))\b",
    re.IGNORECASE,
)
_ZH_SCOPE = re.compile(
    r"(?P<scope>[\u4e00-\u9fffA-Za-z]{1,12}?)(?:的时候|(?<![平有同及准按临随当小暂定实])时(?![间候区差]))|"
    r"(?:写|回|发)给?(?P<object>[\u4e00-\u9fffA-Za-z]{1,8}?)的(?:邮件|方案|周报|报告|文档|消息|稿子)"
)


def scope(text: str) -> frozenset[str] | None:
    """The terms of the situation a content is said for, or None when it is said for every situation."""
    clean = _clean(text)
    chinese = language(clean) == CHINESE
    match = (_ZH_SCOPE if chinese else _EN_SCOPE).search(clean)
    if match is None:
        return None
    said = next(part for part in match.groups() if part)
    return frozenset(query_terms(said)) if chinese else frozenset(fold(term) for term in query_terms(said))


# A fact bounded in the past ("used to", "2018年到2022年") is history: nothing present replaces it.
_EN_HISTORY = re.compile(
    r"\b(?:(?<!get )(?<!getting )(?<!got )(?<!be )(?<!am )(?<!'m )(?<!is )(?<!are )(?<!was )(?<!were )"
    r"used to|formerly|previously|back in (?:19|20)[0-9]{2}|"
    r"(?<!good )(?<!valid )(?:until|till) (?:19|20)[0-9]{2}|"
    r"first (?:car|job|apartment|flat|house|home|bike|phone|boss)|"
    r"from (?:19|20)[0-9]{2} (?:to|until|till) "
    r"(?:19|20)[0-9]{2}|(?:19|20)[0-9]{2}\s*[-–]\s*(?:19|20)[0-9]{2}|"
    r"(?:lived|worked|studied|drove|owned|had|used|played|taught)\b[^.;]{0,40}\bfor "
    r"(?:[0-9]+|a few|several|many|two|three|four|five|six|seven|eight|nine|ten) (?:years|months)|"
    # an event over with its year ("ran a half marathon in 2022"); not a change that lasts ("moved to
    # Porto in 2022", "去年搬到杭州"), which says what is true now
    r"(?:ran|won|finished|completed|visited|attended|translated|wrote)\b[^.;]{0,40}\bin (?:19|20)[0-9]{2}|"
    # a place lived or worked in, in the simple past ("I lived in Reno while I was driving"), not the
    # perfect that goes on ("I've lived in Reno since 2019")
    r"(?<!'ve )(?<!have )(?<!has )(?<!'s )(?<!'d )(?<!had )(?:lived in|worked at|worked for)|"
    # who held a thing before ("the previous tenant's deposit")
    r"(?:previous|former) (?:tenants?|landlords?|owners?|occupants?|bosses|boss|managers?|roommates?|"
    r"flatmates?|housemates?))\b",
    re.IGNORECASE,
)
_ZH_HISTORY = re.compile(
    # 比之前好多了 compares with what was, and speaks of now
    r"(?<!比)以前|(?<!比)之前|曾经|早年|小时候|小的时候|(?:上一任|上任|前任|上一个|之前的)(?:房客|租客|房东|业主|老板|经理|室友)|(?<=[\u4e00-\u9fff])过(?=[。，,；;！!]|$)|第一(?:辆|份|个|套|台|部)|"
    # 开了五年 is over; 开了五年了 still goes on
    r"(?:开|住|干|做|用|养|读|教)了[0-9一二三四五六七八九十两几]+(?:年|个月)(?![0-9一二三四五六七八九十两几]|了)|"
    r"(?:19|20)[0-9]{2}年?\s*(?:到|至|-|–|~)\s*(?:19|20)[0-9]{2}年?"
)


_EN_NOW = re.compile(r"\b(?:now|currently|these days|nowadays|at the moment|right now)\b", re.IGNORECASE)
_ZH_NOW = re.compile(r"现在|目前|如今|眼下")


def speaks_of_now(text: str) -> bool:
    """Whether a content speaks of the present ("now", "现在"): "I used to live in Lisbon, now in Porto"
    is a change, not a history."""
    return _found(text, _ZH_NOW, _EN_NOW)


def historical(text: str) -> bool:
    """Whether a content speaks of a time that is over ("used to", "以前", "2018年到2022年")."""
    return _found(text, _ZH_HISTORY, _EN_HISTORY)


def one_off(text: str) -> bool:
    """Whether a content is a one-time exception ("just this once", "这周五...就这一次")."""
    return _found(text, _ZH_ONE_OFF, _EN_ONE_OFF)


def dated(text: str) -> bool:
    """Whether a content is about one named day ("this Friday", "下周一", "今天")."""
    return _found(text, _ZH_DATED, _EN_DATED)


def of_a_moment(text: str) -> bool:
    """Whether a content is about one moment: a day ("today", "昨天", "on Saturday") or a part of one
    ("this morning", "今早", "午饭后"). A reading of a moment is one of many (a month's checkup is not:
    the next one replaces it)."""
    return dated(text) or _found(text, _ZH_MOMENT, _EN_MOMENT)


def targets(text: str) -> bool:
    """Whether a content gives a target, a limit or a plan ("goal below 6.5%", "nothing heavier than 18
    kg", "目标体重75公斤", "佛山店计划招9个人") rather than what is."""
    return _found(text, _ZH_TARGET, _EN_TARGET)


def habitual(text: str) -> bool:
    """Whether a content says what happens regularly ("every weekday", "每天", "usually")."""
    return _found(text, _ZH_HABIT, _EN_HABIT)


# A bare 也 ("中行的预审批也下来了", "5栋1101周六也约了") adds too, where nothing in the content says
# a change: beside one it is a side remark ("改成周二休息，周一也开门"), and 再也 is "never again".
_ZH_ALSO = re.compile(r"(?<!再)也(?!许|就是|罢)")


# "another" is one more of a kind ("started another novel for them") unless a change is said with it
# ("switched to another bank", "can only do Sundays now, he's got another job").
_EN_ANOTHER = re.compile(r"\banother\b", re.IGNORECASE)


def adds(text: str) -> bool:
    """Whether a content says it adds to what is known ("also", "too", "another", "还要", "另外")."""
    clean = _clean(text)
    if language(clean) != CHINESE:
        if _EN_ADDS.search(clean):
            return True
        return bool(_EN_ANOTHER.search(clean)) and not (replaces(clean) or speaks_of_now(clean))
    if _ZH_ADDS.search(clean):
        return True
    return bool(_ZH_ALSO.search(clean)) and not has_update_cue(clean, strong=True)


# --- measures ------------------------------------------------------------------------------------------

# A number with the measure it counts: "77kg", "21%", "31万", "三次", "8 people", "千字220". Two facts
# that give one measure of one thing different numbers disagree, where a change is said with it.
_EN_MEASURE = re.compile(
    r"(?<![\w.])([0-9]+(?:\.[0-9]+)?)\s?"
    r"(%|percent\b|per cent\b|kgs?\b|kilos?\b|lbs\b|pounds\b|people\b|staff\b|employees\b|workers\b|"
    r"times\b|hours\b)",
    re.IGNORECASE,
)
# Each measure by one name, whatever the language or spelling: "kilos" and "公斤" are "kg".
_UNIT_NAMES = {
    "percent": "%",
    "per cent": "%",
    "kgs": "kg",
    "kilo": "kg",
    "kilos": "kg",
    "公斤": "kg",
    "pounds": "lbs",
    "staff": "people",
    "employees": "people",
    "workers": "people",
    "个人": "人",
}
_ZH_MEASURE = re.compile(rf"({ZH_NUMBER})\s?(万|元|块|公斤|斤|次|个人|人|%|小时)")
_ZH_PER_THOUSAND = re.compile(rf"千字\s?({ZH_NUMBER})")


def measures(text: str) -> frozenset[tuple[str, float]]:
    """(measure, number) pairs a content gives: ("kg", 77.0), ("%", 21.0), ("万", 31.0), ("次", 3.0)."""
    clean = _clean(text)
    found: set[tuple[str, float]] = set()
    for number, unit in _EN_MEASURE.findall(clean):
        found.add((_UNIT_NAMES.get(unit.lower(), unit.lower()), float(number)))
    for number, unit in _ZH_MEASURE.findall(clean):
        value = parse_number(number)
        if value is not None:
            found.add((_UNIT_NAMES.get(unit, unit), float(value)))
    for number in _ZH_PER_THOUSAND.findall(clean):
        value = parse_number(number)
        if value is not None:
            found.add(("千字", float(value)))
    return frozenset(found)


# A profile field a note writes as "Key: value" ("Time zone: Europe/Berlin", "常用邮箱：..."): the key
# is a few words without digits.
_EN_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z '’/-]{0,38}[A-Za-z])\s*:\s+(?P<value>\S.*)$")
_ZH_FIELD = re.compile(r"^\s*(?P<key>[\u4e00-\u9fffA-Za-z]{1,10})\s*[:：]\s*(?P<value>\S.*)$")


# Keys that open a note rather than name a field ("Note: ...", "助手备注：...").
_NOT_A_FIELD = re.compile(
    r"^(?:notes?|memo|update|fyi|reminder|summary|coach note|提醒|更新|记录|总结)$|备注", re.IGNORECASE
)


# Things that are many at once, each its own (orders, bookings, tickets): another number is another one.
_TRANSACTIONS = re.compile(
    r"\b(?:orders?|bookings?|tickets?|reservations?|invoices?|tracking|confirmation|parcels?|packages?|"
    r"shipments?|claims?|cases?|flights?|deliver(?:y|ies)|refunds?|returns?)\b|订单|单号|工单|票|预订|预约|快递|"
    r"运单|航班|发票|退款|退货|报销",
    re.IGNORECASE,
)


def speaks_of_transactions(text: str) -> bool:
    """Whether a content speaks of things that are many at once (orders, bookings, tickets, 订单)."""
    return bool(_TRANSACTIONS.search(_clean(text)))


# A payment made ("paid", "收了", "交了"): an event each time, like an order; a price that changed is
# worded otherwise ("went up to", "涨到", "now costs").
_EN_PAID = re.compile(r"\b(?:paid|charged|spent)\b", re.IGNORECASE)
_ZH_PAID = re.compile(r"[收付交花]了")


def speaks_of_payment(text: str) -> bool:
    """Whether a content records a payment made ("paid the plumber £300", "周师傅修水管收了300")."""
    return _found(text, _ZH_PAID, _EN_PAID)


def profile_field(text: str) -> tuple[str, str] | None:
    """The (key, value) of a content written as one profile field, key case folded; None otherwise."""
    clean = _clean(text).strip()
    match = _EN_FIELD.match(clean) or _ZH_FIELD.match(clean)
    if match is None or len(match.group("key").split()) > 4 or _NOT_A_FIELD.search(match.group("key")):
        return None
    return match.group("key").casefold(), match.group("value")


def speaks_of_self(text: str) -> bool:
    """Whether a content opens with its subject itself ("The user upgraded...", "我换了..."), not with
    someone of theirs ("The user's mother...", "我妈..."): the people it names later are then what it
    says, not whose fact it is ("handed the old phone down to their brother")."""
    clean = _clean(text)
    pattern = _ZH_SELF_OPENING if language(clean) == CHINESE else _EN_SELF_OPENING
    return bool(pattern.match(clean))


def owners(text: str) -> frozenset[str]:
    """The person an English content opens with as an owner ("Oliver's nursery fees: £620", "Mia's
    bedtime is 7"), case folded: two facts of two owners are two facts, however alike. A possessive
    further in is a value or a place ("switched to Dr. Okafor's clinic", "goes to St Anne's")."""
    clean = _clean(text)
    if language(clean) == CHINESE:
        return frozenset()
    opening = _EN_OWNER.match(clean)
    if opening is None or opening.group(1).casefold() in _NOT_OWNERS:
        return frozenset()
    return frozenset({opening.group(1).casefold()})


_EN_OWNER = re.compile(r"\s*([A-Z][a-z]+)['’]s\b")
# Capitalised words that own nothing of a person's: the subject, an opening word, a season, a day.
_NOT_OWNERS = frozenset(
    "user it that there what today tonight tomorrow yesterday monday tuesday wednesday thursday "
    "friday saturday sunday january february march april may june july august september october november "
    "december year week month mum mom dad mother father".split()
)


def names(text: str) -> frozenset[str]:
    """The people a content names by name, where it says who they are or makes them its subject: the
    name after a relation ("my daughter Emma", "女儿小雨") and the name that opens a clause ("Emma
    started ...", "小雨今年..."). Case folded; a Chinese candidate is the two characters in that place."""
    clean = _clean(text)
    found: set[str] = set()
    if language(clean) == CHINESE:
        found.update(clean[m.end() : m.end() + 2] for m in _ZH_HOLDER.finditer(clean))
        for clause in _ZH_CLAUSE.split(clean):
            opening = _ZH_SELF_FIRST.match(clause)
            first_two = clause[opening.end() if opening else 0 :].strip()[:2]
            if len(first_two) == 2:
                found.add(first_two)
        return frozenset(
            name for name in found if len(name) == 2 and all("\u4e00" <= c <= "\u9fff" for c in name)
        )
    found.update(
        m.group(2).casefold() for m in _EN_HOLDER.finditer(clean) if m.group(2) and m.group(2)[0].isupper()
    )
    for clause in _EN_CLAUSE.split(clean):
        opening = _EN_NAME.match(clause)
        if opening is not None and opening.group(1).casefold() not in _EN_NOT_NAMES | _EN_OPENING_WORDS:
            found.add(opening.group(1).casefold())
    return frozenset(found)


# Words that open a memory's sentence capitalised without naming anyone ("Got engaged last month").
_EN_OPENING_WORDS = frozenset(
    "got just finally recently lately started moved switched quit please new old since after still "
    "currently usually always never loves likes hates prefers wants works lives".split()
)


# "Manager" names a person's boss when it is someone's ("my manager", "the user's manager"); otherwise it
# is a job ("promoted to manager", "Manager at Deloitte"). 产品经理, 项目经理 are jobs as well.
_EN_TITLES = frozenset({"manager", "boss"})
_EN_POSSESSED = re.compile(r"(?:\b(?:my|his|her|their|our|your)|'s)\s*$", re.IGNORECASE)
_ZH_JOB_TITLE = re.compile(r"[品目户售务门总]经理")


# Suffixes folded off English words, longest first, so "majoring" and "majors", "smoker" and
# "smoking" share a term. Crude on purpose: only the overlap of two facts is measured with it.
_SUFFIX = re.compile(r"(?<=[a-z]{3})(?:ings?|ers?|ed|es|s)$")
_ZH_FUNCTION = re.compile(r"用户|我|她|他|的|了|是|在|有|很|都|也|就|[^\w]")


def topic_terms(text: str) -> frozenset[str]:
    """The content terms of a fact (lexical.query_terms: words without function words, CJK bigrams),
    without the words that name the subject itself or a change ("now", "现在"). English words are
    folded to a rough stem; Chinese loses its function characters first, so "我对花生过敏" and
    "用户花生过敏" share every bigram of 花生过敏."""
    clean = _clean(text)
    if language(clean) == CHINESE:
        cue: re.Pattern[str] = _ZH_CUE
        terms = frozenset(query_terms(_ZH_FUNCTION.sub(" ", clean)))
        return frozenset(term for term in terms - _SELF_TERMS if not cue.fullmatch(term))
    return frozenset(
        fold(term) for term in query_terms(clean) if term not in _SELF_TERMS and not _EN_CUE.fullmatch(term)
    )


_DOUBLED = re.compile(r"([b-df-hj-np-tv-z])\1$")


def fold(word: str) -> str:
    """An English word's rough stem: "running", "runs" and "run" are "run"; "smoker", "smoking" are
    "smok". A Chinese term is itself."""
    return _DOUBLED.sub(r"\1", _SUFFIX.sub("", word))


_SWAP_SELF = re.compile(
    r"the user's|the user|user's|user|i'm|i|my|me|also|too|用户|我|的|了|也|还|都|又|[^\w]", re.IGNORECASE
)


def swapped(a: str, b: str) -> bool:
    """Whether two contents differ by one short span swapped for another of the same length: a name,
    a place or an object ("黄山" for "泰山", "dog" for "cat"), which makes them two facts however much
    of their wording they share."""
    clean_a, clean_b = _clean(a), _clean(b)
    chinese = language(clean_a) == CHINESE
    if chinese:
        units_a: list[str] = list(_SWAP_SELF.sub("", clean_a))
        units_b: list[str] = list(_SWAP_SELF.sub("", clean_b))
    else:
        units_a = [w for w in re.findall(r"\w+", clean_a.casefold()) if not _SWAP_SELF.fullmatch(w)]
        units_b = [w for w in re.findall(r"\w+", clean_b.casefold()) if not _SWAP_SELF.fullmatch(w)]
    head, tail = common_ends(units_a, units_b)
    rest_a, rest_b = len(units_a) - head - tail, len(units_b) - head - tail
    if chinese:  # names differ in length: 爱奇艺, 腾讯视频
        return 1 <= rest_a <= _ZH_SWAP_CHARS and 1 <= rest_b <= _ZH_SWAP_CHARS
    return 1 <= rest_a == rest_b <= _EN_SWAP_WORDS


_ZH_SWAP_CHARS = 4
_EN_SWAP_WORDS = 2


def common_ends(a: Sequence[str], b: Sequence[str]) -> tuple[int, int]:
    """How many units two sequences share at their beginning, then at their end (never overlapping):
    what is left between is where they differ."""
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail
