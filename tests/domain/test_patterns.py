from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.conflicts import Action, Existing, NewMemory, resolve
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Entities, Kind, Tier
from hindsight_server.domain.patterns import EpisodeFacts, find_patterns
from tests.domain.builders import memory

DAY = datetime(2025, 1, 6, 9, tzinfo=UTC)


def episode(
    n: int,
    entities: Entities,
    *,
    subject: str = "user-7",
    intent: str = "book_meeting_room",
    language: str = "zh",
) -> EpisodeFacts:
    return EpisodeFacts(f"e-{n}", subject, intent, entities, DAY + timedelta(days=7 * n), language)


THREE_IN_A = [episode(n, {"building": "A", "date": f"2025-01-{10 + n}"}) for n in range(3)]


@pytest.mark.parametrize(("language", "content"), [("zh", "通常预订A栋"), ("en", "usually books building A")])
def test_three_episodes_booking_building_a_make_a_habit_with_three_sources(
    language: str, content: str
) -> None:
    episodes = [replace(e, language=language) for e in THREE_IN_A]
    [pattern] = find_patterns(episodes)
    assert pattern.content == content
    assert pattern.source_ids == ("e-0", "e-1", "e-2")
    assert (pattern.subject, pattern.intent, pattern.entity, pattern.value) == (
        "user-7",
        "book_meeting_room",
        "building",
        "A",
    )
    assert pattern.entities == {"building": "A"}
    assert pattern.confidence == 0.75  # 3 of 3, x 3/4
    assert (pattern.first_seen, pattern.last_seen) == (DAY, DAY + timedelta(days=14))


def test_patterns_are_deterministic_and_idempotent() -> None:
    first = find_patterns(THREE_IN_A)
    assert find_patterns(list(reversed(THREE_IN_A))) == first
    assert find_patterns(THREE_IN_A) == first
    assert first[0].key.startswith("pattern-") and len(first[0].key) == len("pattern-") + 32
    fourth = [*THREE_IN_A, episode(3, {"building": "a"})]  # one more source, same habit: same key
    assert find_patterns(fourth)[0].key == first[0].key
    assert find_patterns(fourth)[0].source_ids == ("e-0", "e-1", "e-2", "e-3")


@pytest.mark.parametrize(
    ("episodes", "found"),
    [
        (THREE_IN_A[:2], []),  # two are not a habit
        (THREE_IN_A, [("building", "A", 1.0)]),  # the dates differ: only the building repeats
        ([*THREE_IN_A, *(episode(n, {"building": "B"}) for n in range(3, 7))], [("building", "B", 4 / 7)]),
        (
            [*THREE_IN_A, *(episode(n, {"building": "B"}) for n in range(3, 6))],
            [("building", "A", 0.5), ("building", "B", 0.5)],
        ),
        (
            [replace(e, subject=f"user-{i}") for i, e in enumerate(THREE_IN_A)],
            [],
        ),  # three users, one episode each
        ([replace(e, intent="") for e in THREE_IN_A], []),  # no intent, nothing to abstract
        (
            [episode(n, {"participants": list(["张三", "李四"][: n + 1])}) for n in range(4)],
            [("participants", "张三", 1.0), ("participants", "李四", 0.75)],
        ),
        (
            [episode(n, {"part_of_day": "afternoon", "people": 10}) for n in range(3)],
            [("part_of_day", "afternoon", 1.0), ("people", 10, 1.0)],
        ),
    ],
)
def test_which_patterns(episodes: list[EpisodeFacts], found: list[tuple[str, object, float]]) -> None:
    assert [(p.entity, p.value, p.share) for p in find_patterns(episodes)] == found


@pytest.mark.parametrize(
    ("entities", "zh", "en"),
    [
        ({"part_of_day": "afternoon"}, "通常在下午预订", "usually books in the afternoon"),
        ({"time": "15:00"}, "通常在15:00预订", "usually books at 15:00"),
        ({"people": 10}, "通常为10人预订", "usually books for 10 people"),
        ({"room": "301"}, "通常预订301室", "usually books room 301"),
        ({"participants": ["Alice"]}, "通常与Alice预订", "usually books with Alice"),
    ],
)
def test_habit_wording(entities: Entities, zh: str, en: str) -> None:
    episodes = [episode(n, entities) for n in range(3)]
    assert find_patterns(episodes)[0].content == zh
    assert find_patterns([replace(e, language="en") for e in episodes])[0].content == en


def test_an_unknown_intent_still_reads() -> None:
    episodes = [episode(n, {"building": "A"}, intent="visit_office", language="en") for n in range(3)]
    assert find_patterns(episodes)[0].content == "usually chooses building A"


def test_the_thresholds_are_parameters() -> None:
    assert find_patterns(THREE_IN_A[:2], min_episodes=2)[0].source_ids == ("e-0", "e-1")
    assert find_patterns(THREE_IN_A, keys=("date",)) == []
    mixed = [*THREE_IN_A, *(episode(n, {"building": "B"}) for n in range(3, 6))]
    assert find_patterns(mixed, min_share=0.6) == []


@pytest.mark.parametrize(
    ("min_episodes", "min_share", "field"), [(0, 0.5, "min_episodes"), (3, 0.0, "min_share")]
)
def test_bad_thresholds(min_episodes: int, min_share: float, field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        find_patterns(THREE_IN_A, min_episodes=min_episodes, min_share=min_share)
    assert error.value.field == field


def test_a_pattern_becomes_a_semantic_preference_linked_to_its_sources() -> None:
    [pattern] = find_patterns(THREE_IN_A)
    draft = pattern.draft("acme")
    assert (draft.tier, draft.kind, draft.subject, draft.intent) == (
        Tier.SEMANTIC,
        Kind.PREFERENCE,
        "user-7",
        "book_meeting_room",
    )
    assert (draft.content, draft.confidence, draft.valid_from) == ("通常预订A栋", 0.75, DAY)
    assert draft.entities == {"building": "A", "pattern": pattern.key, "source_ids": ["e-0", "e-1", "e-2"]}
    assert draft.idempotency_key == f"{pattern.key}:3"
    assert find_patterns(THREE_IN_A)[0].draft("acme") == draft  # a rerun writes the same thing


def test_two_habits_never_supersede_each_other_but_more_support_is_a_new_version() -> None:
    episodes = [episode(n, {"building": "A", "part_of_day": "afternoon"}) for n in range(4)]
    building, afternoon = (NewMemory.of(p.draft("acme")) for p in find_patterns(episodes[:3]))
    stored = Existing(
        "m-1",
        building.subject,
        building.kind,
        building.tier,
        building.content,
        building.intent,
        building.entities,
    )
    assert resolve(afternoon, [stored]).action is Action.NEW
    grown = NewMemory.of(find_patterns(episodes)[0].draft("acme"))
    assert resolve(grown, [stored]).action is Action.SUPERSEDE


def test_episode_facts_of_a_stored_episode() -> None:
    stored = memory(
        id="m-9",
        tier=Tier.EPISODIC,
        intent="book_meeting_room",
        entities={"building": "A"},
        content="用户订会议室：A栋；已完成",
        valid_from=DAY,
    )
    assert EpisodeFacts.of(stored) == EpisodeFacts(
        "m-9", "user-7", "book_meeting_room", {"building": "A"}, DAY, "zh"
    )
