"""Dedupe and supersede: what a new memory does to the active memories already there.

Only memories with the same subject, kind and tier are compared (an episode never replaces a habit),
and never two that name different things: entities that name the thing itself
(`ConflictPolicy.distinct_keys`: an order id, a session) with different values, contents that both
name identifiers and share none (order 3F9A0C21DE, order 7B2E11F0AA: domain/facts.py), or two kinds of
one slot (a work and a personal e-mail, a home and a work phone). For each such
existing memory, the first rule that holds, in this order:

1. SUPERSEDE, structured: the same non-empty `intent` and an entity key both carry with different
   values ({"date": "2026-12-02"} then {"date": "2026-12-04"}). Which keys count is
   `ConflictPolicy.value_keys` (None: every key).
2. MERGE, exact: the same normalised content (NFKC, case folded, white space and punctuation
   dropped), so duplicates merge without embeddings.
3. By slot, for facts and preferences: both fill the same slot of the same holder (where the user lives,
   works, studies; a phone number, a favourite, a spouse: domain/facts.py). SUPERSEDE when the value
   changed ("lives in Lisbon", "moved to Porto") or the new one ends it ("no longer works at Acme"),
   whatever the similarity of the wording; MERGE when every slot and value token is the same and the
   wording is similar (at least `slot_merge_from`).
   A preference replaces the holder's earlier one on the same thing ("prefers tea in the morning",
   "now prefers coffee in the morning"); one that only adds to it ("green tea") is left alone.
4. MERGE, alike: the same people and no name swapped for another ("黄山", "泰山"), no differing value
   token, and either a similarity above `merge_above` (0.95), or a rewording: similarity at least
   `reworded_merge_from` with `reworded_overlap` of the content terms shared and no change cue (not
   even a "now" the old content lacks).
   From here on, nothing supersedes a fact of a time that is over ("used to", "以前", "实习过", "ran a
   half marathon in 2022"), nor is superseded by one that does not also speak of now; nor by a one-off
   exception ("just this once", "临时"; a named day such as "this Friday" against a habit), an addition
   ("too", "another", "还要"), or a fact said for another situation ("for creative writing", "聊育儿话题时").
5. SUPERSEDE, similar: similarity at least `supersede_from` (0.9), the contents differ in a value token
   (a number, a date word, a place, a name), and the new content reads as a change of the old one: it
   names an identifier the old one names, or it has an update cue ("now", "moved", "改成", a
   preference). Look-alike facts without either are two facts.
6. SUPERSEDE, worded as a change: the new content says on its own that something changed ("switched",
   "换了"), it is about the same people and shares a content term other than a time word or a unit ("元")
   (nor only a person both name, when each speaks of another facet of theirs: "my sister got married",
   "my sister lives in Porto"), and the similarity is at least `changed_supersede_from` (0.25); unless
   the old content already said that change with the same values ("Moving to Toronto", "relocating to
   Toronto"). Also SUPERSEDE a fact or preference (not an event: its "now" is its moment's) of the same
   people when the new content has a weaker cue ("now", "现在"), a value it brings that the old lacks,
   `cued_overlap` of the content terms and a similarity of at least `cued_supersede_from` (0.6). And
   SUPERSEDE a fact or preference that gives a measure (kg, %, 万, times a day: facts.measures) which the
   new content, with a cue, gives another number, where the numbers are all that differs and a term
   beside the measure is shared ("饼干每天遛两次", "饼干现在一天遛三次"), from
   `remeasured_supersede_from` (0.4).
7. SUPERSEDE, by field, for facts and preferences: both are the same profile field with another value
   ("Time zone: America/New_York", "Time zone: Europe/Berlin"), unless the field is of a many-valued
   facet.
   SUPERSEDE, by facet, for facts and preferences: both touch the same facet of the same people's life
   (domain/topics.py: home, work, relationship, phone number, ...) and of the same kind where the facet
   has kinds (a dentist is not a cardiologist), and the new content says it changed (a change word; or
   "now"/"new" and another value; or the opposite setting, "short" then "long"), however far apart
   their words ("I'm single", "got engaged to Marcus"). A many-valued facet (drinks, sports) also needs
   a shared term and a change word beyond starting something; a relationship state replaces another,
   cue or not, and the same state said again is no change; a reading (weight, blood pressure, a lab
   value) is replaced by another number of the same holder's quantity, cue or not, unless the earlier
   one is of one moment ("this morning") or one is a target. A write finds such peers through
   `fact_keys`.
8. otherwise nothing: the memory is NEW with respect to this one. Where the rules are unsure they keep
   both: a wrong supersede hides a true fact, a wrong keep costs a line in recall.

Across existing memories, the strongest rule wins (lower number first), then the higher similarity,
then the earlier in the given order. Every resolution carries its reason. A pair of which one content is
longer than `READ_CHARS` (a document, not a fact) is tried by rules 1 and 2 alone, which bounds a write's
work whatever its peers hold.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.facts import (
    Preference,
    Slot,
    adds,
    common_ends,
    dated,
    fold,
    habitual,
    has_update_cue,
    historical,
    identifiers,
    measures,
    names,
    of_a_moment,
    one_off,
    owners,
    people_terms,
    preference,
    profile_field,
    refers_back,
    relations,
    replaces,
    scope,
    slots,
    speaks_of_now,
    speaks_of_payment,
    speaks_of_self,
    speaks_of_transactions,
    swapped,
    targets,
    topic_terms,
)
from hindsight_server.domain.language import CHINESE, language
from hindsight_server.domain.model import Entities, JsonValue, Kind, Memory, MemoryDraft, Tier
from hindsight_server.domain.numerals import parse_number
from hindsight_server.domain.topics import (
    FACETS,
    FAVOURITE,
    Facet,
    FacetWords,
    facet_named,
    facets,
    quantity_holder,
)

__all__ = [
    "Action",
    "ConflictPolicy",
    "Existing",
    "FactKeys",
    "NewMemory",
    "Resolution",
    "content_key",
    "fact_keys",
    "resolve",
    "slot_keys",
    "value_tokens",
]


class Action(StrEnum):
    NEW = "new"
    MERGE = "merge"  # count + 1, last seen now: no new row
    SUPERSEDE = "supersede"  # the target becomes superseded; the new memory points to it


@dataclass(frozen=True, slots=True)
class ConflictPolicy:
    merge_above: float = 0.95  # docs/design.md: similarity > 0.95 merges
    supersede_from: float = 0.9  # docs/design.md: > 0.9 with a different value supersedes
    # Two facts filling the same slots with the same values merge from this similarity: "the user lives
    # in Lisbon" and "I live in Lisbon" are one fact, worded two ways.
    slot_merge_from: float = 0.8
    # A rewording of a fact (most of its content terms shared, the same values and people, no change
    # cue) merges from this similarity: "I'm allergic to peanuts" and "the user is allergic to peanuts".
    reworded_merge_from: float = 0.7
    reworded_overlap: float = 0.4  # of content terms (Jaccard)
    # A content worded as a change ("switched", "换了") that shares a topic with a fact of the same
    # people supersedes it from this similarity: updates are worded far apart ("I bank with Chase",
    # "I closed my Chase account and moved to Ally"; "Takes amlodipine 5 mg each morning", "Stopped
    # amlodipine last week": 0.31), look-alikes are not worded as changes.
    changed_supersede_from: float = 0.25
    # A content with a cue as weak as "now" or "现在", the same people, a value that differs and this
    # share of the earlier fact's content terms (Jaccard) supersedes it from `cued_supersede_from`:
    # "Dad parks in spot 14", "the Honda goes in 22 now". Look-alikes carry no cue.
    cued_supersede_from: float = 0.6
    cued_overlap: float = 0.15
    # A content that gives a measure the earlier fact gives (kg, %, 万, times a day) another number, with
    # a cue ("now", "down to", "只剩") and a shared term besides the measure, supersedes it from this
    # similarity: "I weigh 82 kg", "down to 77kg"; "饼干每天遛两次", "饼干现在一天遛三次".
    remeasured_supersede_from: float = 0.4
    value_keys: frozenset[str] | None = None  # entity keys whose change makes a new version; None: all
    # Entities that name the thing itself: differing, the memories are two things (two orders, two
    # sessions' episodes), never two versions of one.
    distinct_keys: frozenset[str] = frozenset(
        {"id", "booking_id", "order_id", "ticket_id", "reservation_id", "session_id", "pattern"}
    )

    def __post_init__(self) -> None:
        thresholds = (
            ("merge_above", self.merge_above),
            ("supersede_from", self.supersede_from),
            ("slot_merge_from", self.slot_merge_from),
            ("reworded_merge_from", self.reworded_merge_from),
            ("reworded_overlap", self.reworded_overlap),
            ("changed_supersede_from", self.changed_supersede_from),
            ("cued_supersede_from", self.cued_supersede_from),
            ("cued_overlap", self.cued_overlap),
            ("remeasured_supersede_from", self.remeasured_supersede_from),
        )
        for name, value in thresholds:
            if not 0.0 <= value <= 1.0:
                raise InvalidArgument(name, "must be between 0 and 1")
        if self.supersede_from > self.merge_above:
            raise InvalidArgument("supersede_from", "must not be above merge_above")


@dataclass(frozen=True, slots=True)
class NewMemory:
    subject: str
    kind: Kind
    tier: Tier
    content: str
    intent: str = ""
    entities: Entities = field(default_factory=dict)

    @classmethod
    def of(cls, draft: MemoryDraft) -> NewMemory:
        return cls(draft.subject, draft.kind, draft.tier, draft.content, draft.intent, draft.entities)


@dataclass(frozen=True, slots=True)
class Existing:
    id: str
    subject: str
    kind: Kind
    tier: Tier
    content: str
    intent: str = ""
    entities: Entities = field(default_factory=dict)
    similarity: float | None = None  # cosine to the new memory; None when either has no embedding

    @classmethod
    def of(cls, memory: Memory, similarity: float | None = None) -> Existing:
        return cls(
            memory.id,
            memory.subject,
            memory.kind,
            memory.tier,
            memory.content,
            memory.intent,
            memory.entities,
            similarity,
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    action: Action
    target_id: str | None  # the memory merged into or superseded; None for NEW
    reason: str
    changed: tuple[tuple[str, JsonValue, JsonValue], ...] = ()  # (entity key, old, new) when structured


_DROPPED = re.compile(r"[\W_]+")


def content_key(text: str) -> str:
    """The content as exact-duplicate detection sees it: NFKC (full-width to half-width), case folded,
    without white space or punctuation. "Uses CSV." and "ｕｓｅｓ  ｃｓｖ" have the same key."""
    return _DROPPED.sub("", unicodedata.normalize("NFKC", text).casefold())


_NUMBER = r"[0-9]+(?:[.:/-][0-9]+)*|[零〇一二两三四五六七八九十百千万]+"
_EN_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
              "october", "november", "december")  # fmt: skip
_MONTHS = frozenset(_EN_MONTHS)
_EN_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_EN_SHORT_WEEKDAYS = ("mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun")
_ALL_WEEKDAYS = "|".join(_EN_WEEKDAYS + _EN_SHORT_WEEKDAYS)
# A part of the day is a value too: a pill taken at night is not the one taken in the morning.
_PART_OF_DAY = {
    "morning": "morning", "mornings": "morning", "afternoon": "afternoon", "afternoons": "afternoon",
    "evening": "evening", "evenings": "evening", "night": "night", "nights": "night", "tonight": "night",
    "bedtime": "night", "早上": "morning", "早晨": "morning", "上午": "morning", "中午": "noon",
    "下午": "afternoon", "傍晚": "evening", "晚上": "evening", "夜里": "night", "睡前": "night",
}  # fmt: skip
_EN_PARTS_OF_DAY = "|".join(word for word in _PART_OF_DAY if word.isascii())
_ZH_PARTS_OF_DAY = "|".join(word for word in _PART_OF_DAY if not word.isascii())
_DATE_WORD = (
    rf"(?:周|星期|礼拜)[一二三四五六日天]|[春夏秋冬][天季]|{_ZH_PARTS_OF_DAY}|\b(?:{_ALL_WEEKDAYS}|"
    rf"{_EN_PARTS_OF_DAY}|january|february|march|april|june|july|august|september|october|november|december)\b"
)
# English numbers in words and ordinals are values like digits: "two kids", "2 children".
_EN_NUMBER_WORDS = (
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|"
    r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\b"
)
_EMAIL_ADDRESS = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,190}\.[A-Za-z]{2,24}")
_HOUR = r"[0-9]+|[零〇一二两三四五六七八九十]+"
_HALF_PAST = re.compile(rf"({_HOUR})点半")
_ZH_TOKENS = re.compile(
    rf"{_DATE_WORD}|(?:{_HOUR})点半|[0-9]+(?:[ -][0-9]+)+|{_NUMBER}|"
    r"[a-z][a-z0-9+#.-]*",
    re.IGNORECASE,
)
# A phone number's groups are one value, also at the end of a sentence ("... 415-555-0182.").
_EN_TOKENS = re.compile(
    rf"{_DATE_WORD}|{_EN_NUMBER_WORDS}|[0-9]+(?:[ -][0-9]+)+(?![.:/][0-9])|[0-9]+(?:[.:/-][0-9]+)*",
    re.IGNORECASE,
)
_EN_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z0-9+#-]*")
_NOT_NAMES = frozenset({"i", "am", "pm", "a.m", "p.m"})
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
             "eighth": 8, "ninth": 9, "tenth": 10}  # fmt: skip
_WHOLE_HOUR = re.compile(r"([0-9]{1,2}):00")


_GROUPED_DIGITS = re.compile(r"[0-9]+(?:[ -][0-9]+)+")
_WEEKDAYS = {name: index for index, name in enumerate(_EN_WEEKDAYS)} | {
    short: index for short, index in zip(_EN_SHORT_WEEKDAYS, (0, 1, 1, 2, 3, 3, 3, 4, 5, 6), strict=True)
}
_ZH_WEEKDAYS = {char: index for index, char in enumerate("一二三四五六日")} | {"天": 6}


def _canonical(token: str) -> str:
    """One spelling per value: 十 and 10 are "10"; 周五, 星期五 and Friday are "weekday:4"; a number
    written with separators is its digits (555-0148 and 555 0148 are one phone number)."""
    key = token.casefold()
    if _GROUPED_DIGITS.fullmatch(key):
        return re.sub(r"[^0-9]", "", key)
    if key in _WEEKDAYS:
        return f"weekday:{_WEEKDAYS[key]}"
    if key[-1] in _ZH_WEEKDAYS and key[:-1] in ("周", "星期", "礼拜"):
        return f"weekday:{_ZH_WEEKDAYS[key[-1]]}"
    if key in _ORDINALS:
        return str(_ORDINALS[key])
    half_past = _HALF_PAST.fullmatch(key)
    if half_past:  # 十点半 is 10:30
        return f"{_canonical(half_past.group(1))}:30"
    if key in _PART_OF_DAY:
        return f"time:{_PART_OF_DAY[key]}"
    whole_hour = _WHOLE_HOUR.fullmatch(key)
    if whole_hour:  # 8:00 is 8 (am), as "8am" reads
        return str(int(whole_hour.group(1)))
    number = parse_number(key)
    return str(number) if number is not None else key


def value_tokens(text: str) -> frozenset[str]:
    """The words in a content that carry a value, one spelling each: numbers (Chinese ones too), date
    words, and names: Latin words inside Chinese text (CSV, A栋's A), capitalised words inside English."""
    clean = unicodedata.normalize("NFKC", text).strip()
    emails = {address.casefold() for address in _EMAIL_ADDRESS.findall(clean)}
    clean = _EMAIL_ADDRESS.sub(" ", clean)
    if language(clean) == "zh":
        # A lone 一 counts a thing ("一辆车", "一杯豆浆", "一般"): it is an article, not a value.
        found = (token for token in _ZH_TOKENS.findall(clean) if token != "一")
        return frozenset(emails | {_canonical(token) for token in found})
    tokens = {_canonical(token) for token in _EN_TOKENS.findall(clean)}
    tokens.update(
        _canonical(token) for token in _EN_PROPER.findall(clean) if token.casefold() not in _NOT_NAMES
    )
    return frozenset(emails | tokens)


def _parts_of_day(tokens: frozenset[str]) -> frozenset[str]:
    return frozenset(token for token in tokens if token.startswith("time:"))


def _differing(new: frozenset[str], new_text: str, old: frozenset[str], old_text: str) -> list[str]:
    """The value tokens one content has and the other has not. A name that the other content spells
    inside a longer token is not a difference: "Jake Miller" and "jake.miller@gmail.com"."""
    new_folded, old_folded = new_text.casefold(), old_text.casefold()
    if not (_parts_of_day(new) and _parts_of_day(old)):
        # A part of the day said on one side only is a detail left out, not another value.
        new, old = new - _parts_of_day(new), old - _parts_of_day(old)

    def missing(token: str, other: str) -> bool:
        return not (token.isalpha() and token in other)

    new_short, old_short = _abridged_years(new_text), _abridged_years(old_text)

    def same_year(
        token: str, short: frozenset[str], other: frozenset[str], other_short: frozenset[str]
    ) -> bool:
        """A year in full on one side, abridged on the other ("2014"; "'14", "14年"), is one value."""
        if _FULL_YEAR.fullmatch(token):
            return token[2:] in other_short
        return token in short and (f"19{token}" in other or f"20{token}" in other)

    new_only = {t for t in new - old if not same_year(t, new_short, old, old_short)}
    old_only = {t for t in old - new if not same_year(t, old_short, new, new_short)}
    return sorted(
        {t for t in new_only if missing(t, old_folded)} | {t for t in old_only if missing(t, new_folded)}
    )


_FULL_YEAR = re.compile(r"(?:19|20)[0-9]{2}")
_ABRIDGED_YEAR = re.compile(r"['’]([0-9]{2})\b|(?<![0-9])([0-9]{2})年")


def _abridged_years(text: str) -> frozenset[str]:
    """The years a content writes with two digits: "'14", "09年"."""
    return frozenset(a or b for a, b in _ABRIDGED_YEAR.findall(text))


def _same(a: JsonValue, b: JsonValue) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return content_key(a) == content_key(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return str(a) == str(b) if not isinstance(a, list | dict) else a == b


@dataclass(frozen=True, slots=True)
class _Reading:
    """What the rules read in a content, once: its value tokens, slots and identifiers."""

    values: frozenset[str]
    slots: dict[tuple[str, str], Slot]
    identifiers: frozenset[str]
    preference: Preference | None
    relations: frozenset[str]
    owners: frozenset[str]  # the people it names as owners ("Oliver's fees"): facts.owners
    people: frozenset[str]  # the content terms that name those people ("sist"): facts.people_terms
    topic: frozenset[str]
    cue: bool  # reads as a change or a preference: has_update_cue
    changes: bool  # says on its own that something changed: has_update_cue(strong=True)
    facets: FacetWords  # the facets of a person's life it is about (domain/topics.py)
    # Of each facet of readings it touches, whose quantity it reads ("" the subject's): topics.quantity_holder
    holders: Mapping[str, str]
    names: frozenset[str]  # the people it names by name (Emma, 小雨)
    of_self: bool  # opens with its subject itself: the people it names later are not whose fact it is
    pronoun: bool  # speaks of one other person as "he", "she", "她": refers_back
    exception: bool  # a one-off exception ("just this once", "临时"): facts.one_off
    dated: bool  # about one named day ("this Friday", "下周一"): facts.dated
    habit: bool  # what happens regularly ("every weekday", "每天"): facts.habitual
    history: bool  # speaks of a time that is over ("used to", "以前"): facts.historical
    now: bool  # speaks of the present ("now", "现在"): facts.speaks_of_now
    adds: bool  # says it adds to what is known ("also", "还要"): facts.adds
    replaces: bool  # a change word beyond starting something: facts.replaces
    scope: frozenset[str] | None  # the situation it is said for ("for technical questions"): facts.scope
    many: bool  # speaks of things many at once (orders, bookings): facts.speaks_of_transactions
    paid: bool  # records a payment made ("paid the plumber £300", "收了300"): facts.speaks_of_payment
    measures: frozenset[tuple[str, float]]  # numbers with what they measure ("77kg", "三次"): facts.measures
    moment: bool  # about one moment ("this morning", "昨天"): facts.of_a_moment
    target: bool  # gives a target or a limit ("goal below 6.5%"): facts.targets
    # "Time zone: Europe/Berlin" as (key, value), a field that holds one value: _single_field
    field: tuple[str, str] | None

    @classmethod
    def of(cls, content: str, kind: Kind) -> _Reading:
        # A subject's nearest peers are the same memories write after write: each is read once.
        return _cached_reading(content, kind)

    @classmethod
    def read(cls, content: str, kind: Kind) -> _Reading:
        filled = slots(content) if kind in _SLOT_KINDS else ()
        in_values = [slot.value for slot in filled]
        # A slot's value (a username, an e-mail) is what changes, not what names the thing.
        named = frozenset(i for i in identifiers(content) if not any(i in value for value in in_values))
        prefers = preference(content) if kind in _SLOT_KINDS else None
        about = facets(content) if kind in _SLOT_KINDS else {}
        holders = {
            name: quantity_holder(content, facet) for name in about if (facet := facet_named(name)).readings
        }
        return cls(
            value_tokens(content),
            {slot.key: slot for slot in filled},
            named,
            prefers,
            relations(content),
            owners(content),
            people_terms(content),
            topic_terms(content),
            has_update_cue(content),
            has_update_cue(content, strong=True),
            about,
            holders,
            names(content),
            speaks_of_self(content),
            refers_back(content),
            one_off(content),
            dated(content),
            habitual(content),
            historical(content),
            speaks_of_now(content),
            adds(content),
            replaces(content),
            scope(content),
            speaks_of_transactions(content),
            speaks_of_payment(content),
            measures(content),
            of_a_moment(content),
            targets(content),
            _single_field(content),
        )


def slot_keys(content: str) -> tuple[str, ...]:
    """The slots a content fills, as the store indexes them to find a fact's earlier versions
    ("self:residence"), whatever the memory's kind (the rules check kinds themselves)."""
    return tuple(f"{slot.holder}:{slot.name}" for slot in slots(content))


@dataclass(frozen=True, slots=True)
class FactKeys:
    """How the store files a fact, and finds the earlier facts a new one could replace beyond its nearest
    by meaning: "got engaged to Marcus" is far from "I'm single" (cosine 0.17) but both are filed under
    the relationship facet."""

    filed_under: str | None  # its first slot ("self:residence"), else its first facet ("facet:relationship")
    looks_for: tuple[str, ...]  # its slots, its facets, and the slots that are its facets ("self:vehicle")


def fact_keys(content: str) -> FactKeys:
    """The keys of a content, whatever the memory's kind: an Update can change the kind without the
    content, and the rules check kinds themselves. None for a content longer than READ_CHARS, which the
    rules that need them do not read."""
    if len(content) > READ_CHARS:
        return FactKeys(None, ())
    filled = slot_keys(content)
    touched = facets(content)
    # In FACETS' order, single-valued facets first: the one a fact is filed under is its likeliest. A
    # favourite ("favourite:band") is the facts.py slot of the same name.
    known = [facet for facet in FACETS if facet.name in touched]
    favourites = sorted(name for name in touched if facet_named(name) is FAVOURITE)
    about = [*favourites, *(facet.name for facet in known)]
    filed = filled[0] if filled else (f"facet:{about[0]}" if about else None)
    looks = [*filled, *(f"facet:{name}" for name in about), *(f"self:{name}" for name in favourites)]
    looks.extend(f"self:{slot}" for facet in known for slot in facet.slots)
    return FactKeys(filed, tuple(dict.fromkeys(looks)))


# Only rules 1 and 2 (structured, exact) read a pair of which one content is longer than this: the others
# read a fact, a sentence or a few (real turns: 99% under 340 characters), and a reading costs ~9 ms of
# CPU a KB of text; a 16 KB document against its 20 peers took 0.3-0.5 s a write, with the GIL.
READ_CHARS = 1_000


@functools.lru_cache(maxsize=4_096)  # only contents up to READ_CHARS are read: at most ~10 MB
def _cached_reading(content: str, kind: Kind) -> _Reading:
    return _Reading.read(content, kind)


# Kinds whose memories fill a person's slots; an event that moved a person is not their address.
_SLOT_KINDS = frozenset({Kind.FACT, Kind.PREFERENCE})


def _rule_unread(
    new: NewMemory, new_key: str, old: Existing, policy: ConflictPolicy
) -> tuple[int, Resolution] | None:
    """Rules 1 and 2 alone, for a pair of which one content is longer than READ_CHARS."""
    if _entities_apart(new, old, policy):
        return None
    return _structured_or_exact(new, new_key, old, policy)


def _structured_or_exact(
    new: NewMemory, new_key: str, old: Existing, policy: ConflictPolicy
) -> tuple[int, Resolution] | None:
    """Rule 1 (a structured change of an intent's entity) or rule 2 (the same content), else None."""
    changed = _changed_values(new, old, policy)
    if changed:
        keys = ", ".join(key for key, _, _ in changed)
        reason = f"same intent {new.intent!r}, new value for {keys}"
        return 1, Resolution(Action.SUPERSEDE, old.id, reason, changed)
    if new_key == content_key(old.content):
        return 2, Resolution(Action.MERGE, old.id, "same content")
    return None


def _distinct(new: _Reading, old: _Reading) -> bool:
    """Both name the thing they are about (an order id) and the names differ, or both fill a kind of one
    slot and the kinds differ (a work e-mail and a personal one)."""
    if _other_kind(new, old):
        return True
    return bool(
        new.identifiers and old.identifiers and not new.identifiers & old.identifiers
    ) and not _renumbered(new, old)


def _entities_apart(new: NewMemory, old: Existing, policy: ConflictPolicy) -> bool:
    """Entities that name the thing itself (`ConflictPolicy.distinct_keys`: an order id, a session) with
    different values."""
    return any(
        key in old.entities and not _same(new.entities[key], old.entities[key])
        for key in policy.distinct_keys
        if key in new.entities
    )


def _renumbered(new: _Reading, old: _Reading) -> bool:
    """Whether a new identifier is the new value of something held one at a time (a parking spot, a
    policy, a card): the new content says it replaced something, and neither speaks of things that are
    many at once (orders, bookings, tickets), where another number is another thing."""
    return new.replaces and not (new.many or old.many)


def _single_field(content: str) -> tuple[str, str] | None:
    """The content as a profile field whose key holds one value, else None: a key of a single-valued
    facet ("Time zone: ...", "Employer: ..."), not of a many-valued one ("Standing meeting: ...") nor one
    no facet knows ("Roster: ...", "Investments: ...", "Amazon order: ...": lists, one line an item)."""
    field = profile_field(content)
    if field is None:
        return None
    named = facets(field[0])
    if not named or any(not facet_named(name).alone for name in named):
        return None
    return field


def _other_kind(new: _Reading, old: _Reading) -> bool:
    """Both fill a slot of one family for one holder, each of its own kind: "email:work", "email:personal"."""
    kinds: dict[tuple[str, str], str] = {}
    for holder, name in old.slots:
        family, _, kind = name.partition(":")
        if kind and family in _KINDED:
            kinds[(holder, family)] = kind
    for holder, name in new.slots:
        family, _, kind = name.partition(":")
        if kind and kinds.get((holder, family), kind) != kind:
            return True
    return False


_KINDED = frozenset({"email", "phone"})  # slots a person holds one of per kind (domain/facts.py)


def _changed_values(
    new: NewMemory, old: Existing, policy: ConflictPolicy
) -> tuple[tuple[str, JsonValue, JsonValue], ...]:
    if not new.intent or new.intent != old.intent:
        return ()
    shared = [key for key in new.entities if key in old.entities]
    return tuple(
        (key, old.entities[key], new.entities[key])
        for key in shared
        if key not in policy.distinct_keys
        and (policy.value_keys is None or key in policy.value_keys)
        and not _same(new.entities[key], old.entities[key])
    )


def _within(short: str, long: str) -> bool:
    """Whether `short` is part of `long`: its words ("lisbon" in "lisbon portugal"), or for Chinese its
    characters in order, with gaps ("白色model" in "白色特斯拉model")."""
    if language(short + long) != CHINESE:
        # A word may be shortened ("econ" for "economics"): four letters or more, at the word's start.
        words = _WORDS.findall(long)
        return all(
            any(word == other or (len(word) >= 4 and other.startswith(word)) for other in words)
            for word in _WORDS.findall(short)
        )
    rest = iter(long)
    return all(char in rest for char in short)


_WORDS = re.compile(r"\w+")


def _by_slot(
    new: _Reading, old: _Reading, old_memory: Existing, policy: ConflictPolicy
) -> tuple[int, Resolution] | None:
    """Rule 3: the same slot of the same holder, changed or ended (SUPERSEDE), or the same (MERGE)."""
    shared = [key for key in new.slots if key in old.slots]
    for key in shared:
        now, before = new.slots[key], old.slots[key]
        label = key[1] if key[0] == "self" else f"{key[0]}'s {key[1]}"
        # One value inside the other ("Lisbon", "Lisbon, Portugal"; "白色model", "白色特斯拉model") is a
        # detail, not a change.
        inside = _within(now.value, before.value) or _within(before.value, now.value)
        if not inside and not now.negated and not before.negated:
            reason = f"same slot, new value: {label} {before.value!r} -> {now.value!r}"
            return 3, Resolution(Action.SUPERSEDE, old_memory.id, reason)
        if now.value == before.value and now.negated != before.negated:
            reason = f"same slot, {'ended' if now.negated else 'holds again'}: {label} {now.value!r}"
            return 3, Resolution(Action.SUPERSEDE, old_memory.id, reason)
    similar = old_memory.similarity is not None and old_memory.similarity >= policy.slot_merge_from
    if (
        new.preference is not None
        and old.preference is not None
        and new.preference.holder == old.preference.holder
    ):
        changed = _preference_change(new.preference, old.preference)
        if changed is None and similar and not shared:
            reason = f"same preference: {' '.join(new.preference.words)!r}"
            return 3, Resolution(Action.MERGE, old_memory.id, reason)
        if changed is not None and changed[0] and changed[1] and (changed[2] or similar):
            reason = f"same preference, new value: {changed[0]!r} -> {changed[1]!r}"
            return 3, Resolution(Action.SUPERSEDE, old_memory.id, reason)
    if shared and similar and new.slots == old.slots and new.values == old.values:
        labels = ", ".join(f"{name} {new.slots[(holder, name)].value!r}" for holder, name in shared)
        return 3, Resolution(Action.MERGE, old_memory.id, f"same slot, same value: {labels}")
    return None


def _preference_change(new: Preference, old: Preference) -> tuple[str, str, bool] | None:
    """What changed between two preferences of one holder: (old value, new value, whether they share a
    context: "in the morning"); None when they are the same. The value is what is left of each once
    their common beginning and end are taken off; empty on one side when one only adds to the other
    ("tea" and "green tea"), which the rules leave alone."""
    if new.words == old.words:
        return None
    head, tail = common_ends(new.words, old.words)
    now, before = new.words[head : len(new.words) - tail], old.words[head : len(old.words) - tail]
    if not now or not before:
        return None if not now and not before else ("", "", False)
    joiner = "" if all(len(word) == 1 for word in now + before) else " "
    return joiner.join(before), joiner.join(now), bool(head or tail)


def _adds_to_preference(new: _Reading, old: _Reading) -> bool:
    """One preference of the holder's only adds to the other ("tea", "green tea"): neither a change
    nor the same, so both stay."""
    if new.preference is None or old.preference is None or new.preference.holder != old.preference.holder:
        return False
    changed = _preference_change(new.preference, old.preference)
    return changed is not None and not (changed[0] and changed[1])


def _rule(
    new: NewMemory, new_reading: _Reading, new_key: str, old: Existing, policy: ConflictPolicy
) -> tuple[int, Resolution] | None:
    """The first rule of the module's list that holds, with its number (lower wins), or None."""
    old_reading = _Reading.of(old.content, old.kind)
    if _distinct(new_reading, old_reading) or _entities_apart(new, old, policy):
        return None
    structured_or_exact = _structured_or_exact(new, new_key, old, policy)
    if structured_or_exact is not None:
        return structured_or_exact
    # A fact of a time that is over stays beside a present one: neither replaces the other.
    history = old_reading.history or (new_reading.history and not new_reading.now)
    by_slot = _by_slot(new_reading, old_reading, old, policy)
    if by_slot is not None and not (history and by_slot[1].action is Action.SUPERSEDE):
        return by_slot
    if old.similarity is None or _adds_to_preference(new_reading, old_reading):
        return None
    differing = _differing(new_reading.values, new.content, old_reading.values, old.content)
    # The same relations, and not two people of one relation by name ("my friend Jake", "my friend Jack").
    same_people = (
        new_reading.relations == old_reading.relations
        and not (new_reading.relations and _named_apart(new_reading, old_reading))
        # "Oliver's nursery fees", "Mia's nursery place": each its owner's
        and not (new_reading.owners and old_reading.owners and not new_reading.owners & old_reading.owners)
    )
    # Two facts that differ by the people they are about, by one swapped name ("黄山", "泰山"), by the
    # kind of a facet (a knee surgeon, a cardiologist) or by whose quantity they read ("用户体重65.5公斤",
    # "浩然体重65.5公斤") are two facts, however near their vectors.
    alike = (
        same_people
        and not swapped(new.content, old.content)
        and not _kinds_apart(new_reading, old_reading)
        and not _held_apart(new_reading, old_reading)
    )
    if not differing and alike and old.similarity > policy.merge_above:
        return 4, Resolution(Action.MERGE, old.id, f"near-identical (similarity {old.similarity:.3f})")
    shared = new_reading.topic & old_reading.topic
    overlap = len(shared) / len(new_reading.topic | old_reading.topic) if shared else 0.0
    # What both are about: a shared term that is neither a time nor the unit of a number ("元": 150 元 of
    # a meal allowance and 300 元 of a dinner limit are two things).
    units = {unit for unit, _ in new_reading.measures | old_reading.measures}
    about = frozenset(term for term in shared if not _time_term(term) and term not in units)
    people = new_reading.people | old_reading.people
    if (
        not differing
        and alike
        # a rewording shares what it is about, not only whose and when ("Dad's birthday is 3 October",
        # "Dad's retirement dinner is on 3 October")
        and any(not term.isdigit() for term in about - people)
        and not new_reading.changes
        and not new_reading.adds  # "滨江那套月租也是3200": another thing with the same value
        and (old_reading.cue or not new_reading.cue)  # "now" said only by the new one: it may have changed
        and old.similarity >= policy.reworded_merge_from
        and overlap >= policy.reworded_overlap
    ):
        reason = f"reworded (similarity {old.similarity:.3f}, {overlap:.0%} of its terms shared)"
        return 4, Resolution(Action.MERGE, old.id, reason)
    one_off = new_reading.exception or (new_reading.dated and old_reading.habit)
    if history or ((new_reading.adds or one_off) and not (old_reading.exception or old_reading.dated)):
        return None  # beside a fact, or an exception to it: a change of nothing lasting
    if _other_scope(new_reading, old_reading):
        return None  # said for another situation ("for creative writing"): both stand
    same_thing = new_reading.identifiers & old_reading.identifiers
    if new_reading.paid and old_reading.paid and not same_thing:
        return None  # two payments are two events, whatever changed between them
    if differing and old.similarity >= policy.supersede_from and (same_thing or new_reading.cue):
        why = f"the same {', '.join(sorted(same_thing))}" if same_thing else "worded as a change"
        return 5, _similar_supersede(old.id, old.similarity, why, differing)
    news = _news(new_reading.changes, old_reading, bool(differing))
    if (
        news
        and same_people
        and about
        and old.similarity >= policy.changed_supersede_from
        and not _kinds_apart(new_reading, old_reading)
        # a change of another facet of a person both name, and nothing else shared: "my sister got
        # married" is not where she lives
        and not (about <= people and _facets_apart(new_reading, old_reading))
    ):
        terms = ", ".join(sorted(about)[:4])
        reason = f"worded as a change of it (similarity {old.similarity:.3f}, about {terms})"
        return 6, Resolution(Action.SUPERSEDE, old.id, reason)
    # a value the new content brings, not one it leaves out ("Sophie (17) ..." then "Sophie prefers ...")
    brought = [token for token in differing if token in new_reading.values]
    # Facts and preferences only: an event says "now" of its moment, not of a state that changed.
    if (
        new.kind in _SLOT_KINDS
        and brought
        and new_reading.cue
        and same_people
        and new_reading.target == old_reading.target  # "计划招9个人", "目前招到4个人": a plan, and what is
        and old.similarity >= policy.cued_supersede_from
        and overlap >= policy.cued_overlap
    ):
        return 6, _similar_supersede(old.id, old.similarity, "worded as a change", brought)
    remeasured = _remeasured(new_reading.measures, old_reading.measures)
    if (
        new.kind in _SLOT_KINDS
        and remeasured
        and new_reading.cue
        and alike
        and new_reading.target == old_reading.target
        # the numbers are all that differs ("the Shenzhen branch has 8 staff" is another branch), and
        # a term beside the measure itself says what is measured ("饼干", not "个人")
        and all(parse_number(token) is not None for token in differing)
        and any(not any(unit in term for unit in remeasured) and not term.isdigit() for term in about)
        and old.similarity >= policy.remeasured_supersede_from
        and not _kinds_apart(new_reading, old_reading)
    ):
        reason = (
            f"the same measure with another number ({', '.join(remeasured)}; similarity {old.similarity:.3f})"
        )
        return 6, Resolution(Action.SUPERSEDE, old.id, reason)
    by_field = _by_field(new_reading, old_reading, old) if new.kind in _SLOT_KINDS else None
    return by_field or _by_facet(new_reading, old_reading, old, bool(shared), differing)


def _remeasured(new: frozenset[tuple[str, float]], old: frozenset[tuple[str, float]]) -> list[str]:
    """The measures both give, each with numbers the other does not give."""
    units = {unit for unit, _ in new} & {unit for unit, _ in old}
    return sorted(
        unit for unit in units if not {n for u, n in new if u == unit} & {n for u, n in old if u == unit}
    )


def _similar_supersede(old_id: str, similarity: float, why: str, values: Sequence[str]) -> Resolution:
    listed = ", ".join(values[:6])
    reason = f"similar (similarity {similarity:.3f}), {why}, and a value differs: {listed}"
    return Resolution(Action.SUPERSEDE, old_id, reason)


def _news(said: bool, old: _Reading, differ: bool) -> bool:
    """Whether a change word (`said`) tells something new: not when the earlier fact was already worded as
    that change with the same values ("Moving to Toronto", "relocating to Toronto"; "我戒了奶茶"). A
    habit's verb is not a change it told ("助听器电池每周换一次": batteries changed every week)."""
    return said and not (old.changes and not old.habit and not differ)


def _other_scope(new: _Reading, old: _Reading) -> bool:
    """Whether two facts are said for different situations: each for its own (no term shared), or one for
    a situation the other does not speak of ("for coding" and "my coding machine" speak of one)."""
    if new.scope is not None:
        return not new.scope & (old.topic if old.scope is None else old.scope)
    if old.scope is not None:
        return not old.scope & new.topic
    return False


# Terms of when, not of what: two facts sharing only "weekends" or "下午" are not about one thing. English
# terms are folded as topic_terms folds them ("morning" is "morn").
_EN_TIME_WORDS = (
    "every", "daily", "weekly", "monthly", "day", "week", "weekend", "weekday", "month", "year", "today",
    "tomorrow", *_EN_WEEKDAYS, *(word for word in _PART_OF_DAY if word.isascii()), *_EN_MONTHS,
)  # fmt: skip
_EN_TIME_TERMS = frozenset(_EN_TIME_WORDS) | frozenset(map(fold, _EN_TIME_WORDS))
_ZH_TIME_TERM = re.compile(
    rf"[每周上下早晚中今明昨本这][天周午上晚末月年]|周[一二三四五六日天末]|星期.|礼拜.|{_ZH_PARTS_OF_DAY}"
)


def _time_term(term: str) -> bool:
    return term.casefold() in _EN_TIME_TERMS or bool(_ZH_TIME_TERM.fullmatch(term))


def _by_field(new: _Reading, old: _Reading, old_memory: Existing) -> tuple[int, Resolution] | None:
    """Rule 7, for profile fields: both written as the same field ("Time zone: America/New_York", "Time
    zone: Europe/Berlin") with another value (fields of many-valued facets are not read: _single_field)."""
    if new.field is None or old.field is None or new.field[0] != old.field[0]:
        return None
    if content_key(new.field[1]) == content_key(old.field[1]):
        return None
    return 7, Resolution(Action.SUPERSEDE, old_memory.id, f"same field, a new value: {new.field[0]}")


def _by_facet(
    new: _Reading,
    old: _Reading,
    old_memory: Existing,
    share_a_term: bool,
    differing: Sequence[str],
) -> tuple[int, Resolution] | None:
    """Rule 7: the same facet of the same people's life (domain/topics.py), and the new content says it
    changed: on its own ("switched", "got engaged", "换了"); with a weaker cue ("now", "new") and a
    value that differs (a value token, or for a facet whose words are values, a word of it the old
    content does not use: "green" after "blue"). Without any cue, two values of one facet are left
    alone: "a checking account at Chase", "a savings account at Chase" are both true. A many-valued
    facet (drinks, sports) needs a strong cue and something shared besides: a content term or a word of
    the facet ("茶" in both). A facet of readings (weight, blood pressure) needs only another number."""
    differ = bool(differing)
    news = _news(new.changes, old, differ)
    for name in sorted(new.facets.keys() & old.facets.keys()):
        facet = facet_named(name)
        now, before = new.facets[name], old.facets[name]
        if _other_kinds(facet, now, before):
            continue  # a dentist and a cardiologist, car and home insurance: two things
        if facet.states:
            # One state at a time: a new one is the change, cue or not ("Sam said yes, she's my fiancée").
            changed = bool(now - before - {""})
        elif facet.alone:
            # "no long explanations" says both of a pair: neither counts as a new value
            said_both = frozenset(word for pair in facet.opposites if pair <= now for word in pair)
            valued = facet.valued and not now - said_both <= before
            # A facet whose value is a person (a manager, a doctor): another name is another value.
            renamed = bool(facet.value_relations) and bool(_latin(new.names) - _latin(old.names))
            changed = news or (new.cue and (differ or valued or renamed)) or facet.contradicts(now, before)
            changed = changed or (facet.readings and _read_again(new, old, facet, differing))
        else:
            changed = _news(new.replaces, old, differ) and (share_a_term or bool(now & before))
        if changed and _same_people(new, old, facet):
            how = "worded as a change" if news else "a new value"
            return 7, Resolution(Action.SUPERSEDE, old_memory.id, f"same facet, {how}: {facet.name}")
    return None


def _read_again(new: _Reading, old: _Reading, facet: Facet, differing: Sequence[str]) -> bool:
    """Whether the new content is a new reading of the quantity the old one read (a facet of readings),
    change word or not: another number; both name the quantity, not only its unit (a price per kilo, a
    fish of 6 斤); both readings or both targets ("goal below 6.5%"); the earlier not of one moment (this
    morning's blood pressure is one reading of many, last night's another), nor both of a month of their
    own (September's checkup and August's); of the same people exactly, and of the same holder by what
    each says before the quantity ("Leo weighs", "Mochi weighs"; "乐乐体重", "体重")."""
    return (
        _gives_number(differing)
        and _names_quantity(facet, new.facets[facet.name])
        and _names_quantity(facet, old.facets[facet.name])
        and new.target == old.target
        and not old.moment
        # each of its own month ("at the September medical", "at the GP visit in August"): two checkups
        and not (new.values & _MONTHS and old.values & _MONTHS)
        and _people(new, facet) == _people(old, facet)
        and _same_holder(new.holders[facet.name], old.holders[facet.name])
    )


def _same_holder(new: str, old: str) -> bool:
    """Two holders of a quantity are one when one names no one the other does not ("mia's", "baby mia";
    not "patient j. singh", "patient r. singh")."""

    def named(holder: str) -> set[str]:
        return {word.replace("'", "").replace("’", "").removesuffix("s") for word in holder.split()}

    return new == old or (bool(new and old) and (named(new) <= named(old) or named(old) <= named(new)))


def _held_apart(new: _Reading, old: _Reading) -> bool:
    """Whether both give a reading of one facet of readings (a number, the quantity named), one the
    subject's own and the other someone's it names ("用户体重65.5公斤", "浩然体重65.5公斤"). Two holders both
    named are told apart by their names (value tokens, swapped names)."""
    if not (_gives_number(new.values) and _gives_number(old.values)):
        return False
    for name in new.holders.keys() & old.holders.keys():
        facet, holders = facet_named(name), {new.holders[name], old.holders[name]}
        if (
            len(holders) == 2
            and "" in holders
            and _names_quantity(facet, new.facets[name])
            and _names_quantity(facet, old.facets[name])
        ):
            return True
    return False


def _gives_number(tokens: Iterable[str]) -> bool:
    return any(token[0].isdigit() for token in tokens)


def _names_quantity(facet: Facet, words: frozenset[str]) -> bool:
    """Whether a content's words of a facet of readings name the quantity, not only its unit ("82 kg")."""
    return any(not word[0].isdigit() and word not in facet.units for word in words)


def _kinds_apart(new: _Reading, old: _Reading) -> bool:
    """Whether both touch a facet that has kinds, each of another kind (car and home insurance)."""
    return any(
        _other_kinds(facet_named(name), new.facets[name], old.facets[name])
        for name in new.facets.keys() & old.facets.keys()
    )


def _facets_apart(new: _Reading, old: _Reading) -> bool:
    """Whether both are about facets of a person's life (domain/topics.py), and none in common."""
    return bool(new.facets and old.facets and not new.facets.keys() & old.facets.keys())


def _other_kinds(facet: Facet, now: frozenset[str], before: frozenset[str]) -> bool:
    """Whether two uses of a facet name kinds of it, and none in common (a dentist, a cardiologist)."""
    kinds_now, kinds_before = facet.kinds_of(now), facet.kinds_of(before)
    return bool(kinds_now and kinds_before and not kinds_now & kinds_before)


def _named_apart(new: _Reading, old: _Reading) -> bool:
    """Whether both name people by name, in Latin script, and none of them is named by both."""
    now, before = _latin(new.names), _latin(old.names)
    return bool(now and before) and not now & before


def _latin(names: frozenset[str]) -> frozenset[str]:
    """The names written in Latin script: Chinese text has no capitals, so its "names" are guesses."""
    return frozenset(name for name in names if name.isascii())


def _same_people(new: _Reading, old: _Reading, facet: Facet) -> bool:
    """Whether two facts of a facet are about the same people: the same relations, less those that are
    the facet's value; or one names a relation the other leaves out and both name the same person
    ("my daughter Emma goes to ...", "Emma started middle school"), or the other says "he" or "she" where
    the one names a single person ("老婆在银行上班", "她辞职了")."""
    now, before = _people(new, facet), _people(old, facet)
    if now == before:
        return True
    if now and before:
        return False
    named, other = (now, old) if now else (before, new)
    return bool(new.names & old.names) or (len(named) == 1 and other.pronoun and not other.of_self)


def _people(reading: _Reading, facet: Facet) -> frozenset[str]:
    """Who a fact of this facet is about: the people it names, less those that are the facet's value
    (the partner a relationship fact names is what changed, not whose fact it is)."""
    if reading.of_self:
        return frozenset()
    return frozenset(relation for relation in reading.relations if not facet.ignores(relation))


def resolve(new: NewMemory, existing: Sequence[Existing], policy: ConflictPolicy | None = None) -> Resolution:
    """MERGE into, SUPERSEDE, or NEW (see the module's rules); pure and explained."""
    policy = policy or ConflictPolicy()
    reading = _Reading.of(new.content, new.kind) if len(new.content) <= READ_CHARS else None
    key = content_key(new.content)
    found: list[tuple[int, float, int, Resolution]] = []
    for position, old in enumerate(existing):
        if (old.subject, old.kind, old.tier) != (new.subject, new.kind, new.tier):
            continue
        if reading is None or len(old.content) > READ_CHARS:
            ruled = _rule_unread(new, key, old, policy)
        else:
            ruled = _rule(new, reading, key, old, policy)
        if ruled is not None:
            found.append((ruled[0], -(old.similarity or 0.0), position, ruled[1]))
    if not found:
        return Resolution(Action.NEW, None, "no active memory with the same subject, kind and tier matches")
    return min(found, key=lambda item: item[:3])[3]
