import time
from dataclasses import replace

import pytest

from hindsight_server.domain.conflicts import (
    Action,
    ConflictPolicy,
    Existing,
    NewMemory,
    Resolution,
    content_key,
    fact_keys,
    resolve,
    value_tokens,
)
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Kind, Tier

BOOKING = NewMemory(
    subject="user-7",
    kind=Kind.TASK,
    tier=Tier.WORKING,
    content="预订A栋会议室，2026-12-04下午，10人",
    intent="book_meeting_room",
    entities={"booking_date": "2026-12-04", "building": "A", "people": 10},
)
WEDNESDAY = Existing(
    id="m-wed",
    subject="user-7",
    kind=Kind.TASK,
    tier=Tier.WORKING,
    content="预订A栋会议室，2026-12-02下午，10人",
    intent="book_meeting_room",
    entities={"booking_date": "2026-12-02", "building": "A", "people": 10},
    similarity=0.97,
)
FACT = NewMemory(subject="user-7", kind=Kind.FACT, tier=Tier.SEMANTIC, content="用户在杭州工作")


def existing_fact(memory_id: str, content: str, similarity: float | None) -> Existing:
    return Existing(memory_id, "user-7", Kind.FACT, Tier.SEMANTIC, content, similarity=similarity)


@pytest.mark.parametrize(
    ("new", "existing", "action", "target", "reason"),
    [
        (  # structured: the booking date changes
            BOOKING,
            [WEDNESDAY],
            Action.SUPERSEDE,
            "m-wed",
            "same intent 'book_meeting_room', new value for booking_date",
        ),
        (  # structured even without embeddings
            BOOKING,
            [replace(WEDNESDAY, similarity=None)],
            Action.SUPERSEDE,
            "m-wed",
            "same intent 'book_meeting_room', new value for booking_date",
        ),
        (  # the same booking again: same entities, same words
            BOOKING,
            [replace(WEDNESDAY, content=BOOKING.content, entities=BOOKING.entities, similarity=None)],
            Action.MERGE,
            "m-wed",
            "same content",
        ),
        (  # another intent is another thing
            BOOKING,
            [replace(WEDNESDAY, intent="book_flight", similarity=0.5)],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
        (  # another subject is never compared
            BOOKING,
            [replace(WEDNESDAY, subject="user-8")],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
        (  # nor another tier: an episode does not replace a habit
            BOOKING,
            [replace(WEDNESDAY, tier=Tier.SEMANTIC)],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
        (  # two orders are two things, whatever their other values
            replace(BOOKING, entities={**BOOKING.entities, "order_id": "o-2"}),
            [replace(WEDNESDAY, entities={**WEDNESDAY.entities, "order_id": "o-1"}, similarity=0.99)],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
        (  # exact duplicate by normalised content, no embeddings
            replace(FACT, content="用户在杭州工作。"),
            [existing_fact("m-1", "用户在杭州工作", None)],
            Action.MERGE,
            "m-1",
            "same content",
        ),
        (
            replace(FACT, content="The user works at ACME"),
            [existing_fact("m-1", "the user works at Acme.", 0.91)],
            Action.MERGE,
            "m-1",
            "same content",
        ),
        (  # near-identical paraphrase: the same slot, the same value
            replace(FACT, content="用户在杭州上班"),
            [existing_fact("m-1", "用户在杭州工作", 0.96)],
            Action.MERGE,
            "m-1",
            "same slot, same value: employer '杭州'",
        ),
        (  # near-identical, no slot
            replace(FACT, content="The user is allergic to peanuts!"),
            [existing_fact("m-1", "The user is allergic to peanuts.", 0.97)],
            Action.MERGE,
            "m-1",
            "same content",
        ),
        (
            replace(FACT, content="The user has a peanut allergy"),
            [existing_fact("m-1", "The user is allergic to peanuts", 0.96)],
            Action.MERGE,
            "m-1",
            "near-identical (similarity 0.960)",
        ),
        (  # near-identical words, a different value: not a merge
            replace(FACT, kind=Kind.PREFERENCE, content="用户偏好Excel格式导出"),
            [replace(existing_fact("m-1", "用户偏好CSV格式导出", 0.96), kind=Kind.PREFERENCE)],
            Action.SUPERSEDE,
            "m-1",
            "same preference, new value: 'csv' -> 'excel'",
        ),
        (
            replace(FACT, kind=Kind.EVENT, tier=Tier.EPISODIC, content="The review moved to Friday at 15:00"),
            [
                Existing(
                    "m-1",
                    "user-7",
                    Kind.EVENT,
                    Tier.EPISODIC,
                    "The review moved to Wednesday at 15:00",
                    similarity=0.92,
                )
            ],
            Action.SUPERSEDE,
            "m-1",
            "similar (similarity 0.920), worded as a change, and a value differs: weekday:2, weekday:4",
        ),
        (  # the same slot and value, similar wording below the merge line: one fact
            replace(FACT, content="用户在杭州上班"),
            [existing_fact("m-1", "用户在杭州工作", 0.93)],
            Action.MERGE,
            "m-1",
            "same slot, same value: employer '杭州'",
        ),
        (  # the same slot and value, but not worded alike: kept, unsure
            replace(FACT, content="用户在杭州上班"),
            [existing_fact("m-1", "用户在杭州工作", 0.6)],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
        (  # similar, same values, no slot, below the merge line: a new memory
            replace(FACT, content="The user has a peanut allergy"),
            [existing_fact("m-1", "The user is allergic to peanuts", 0.93)],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
        (  # a different value but not similar enough to be the same memory
            replace(FACT, content="用户住在3号楼"),
            [existing_fact("m-1", "用户的工位在5楼", 0.7)],
            Action.NEW,
            None,
            "no active memory with the same subject, kind and tier matches",
        ),
    ],
)
def test_resolve(
    new: NewMemory, existing: list[Existing], action: Action, target: str | None, reason: str
) -> None:
    resolution = resolve(new, existing)
    assert (resolution.action, resolution.target_id, resolution.reason) == (action, target, reason)


def fact(content: str) -> NewMemory:
    return replace(FACT, content=content)


@pytest.mark.parametrize(
    ("new", "old", "similarity", "action", "reason"),
    [
        # the same slot, a new value: a version, however far apart the wording
        ("The user moved and now lives in Porto.", "The user lives in Lisbon.", 0.4, Action.SUPERSEDE,
         "same slot, new value: residence 'lisbon' -> 'porto'"),
        ("用户搬家了，现在住在北京。", "用户住在上海。", None, Action.SUPERSEDE,
         "same slot, new value: residence '上海' -> '北京'"),
        ("The user no longer works at Google.", "The user works at Google.", 0.8, Action.SUPERSEDE,
         "same slot, ended: employer 'google'"),
        ("用户的手机号改成了13987654321。", "用户的手机号是13812345678。", 0.9, Action.SUPERSEDE,
         "same slot, new value: phone '13812345678' -> '13987654321'"),
        # whose fact it is decides: the sister's city is not the user's
        ("The user lives in Boston.", "The user's sister lives in Boston.", 0.97, Action.NEW, None),
        ("用户的朋友小刘住在广州。", "用户的朋友小张住在深圳。", 0.9, Action.NEW, None),
        # one value inside the other is a detail, not a change
        ("The user lives in Lisbon, Portugal.", "The user lives in Lisbon.", 0.5, Action.NEW, None),
        # identifiers name the thing: two orders are two memories, however alike
        ("Order 7B2E11F0AA for the user ships to Porto next week.",
         "Order 3F9A0C21DE for the user ships to Porto next week.", 0.99, Action.NEW, None),
        ("用户的订单号是88232，明天到货。", "用户的订单号是88231，明天到货。", 0.99, Action.NEW, None),
        # the same identifier, worded as a change: the order's new version
        ("Order 3F9A0C21DE now ships to Lisbon on Friday.", "Order 3F9A0C21DE ships to Porto on Monday.",
         0.91, Action.SUPERSEDE,
         "similar (similarity 0.910), the same 3f9a0c21de, and a value differs: lisbon, porto, "
         "weekday:0, weekday:4"),
        # look-alikes that are not worded as changes stay two facts
        ("The user likes Thai food.", "The user likes Italian food.", 0.93, Action.NEW, None),
        ("用户喜欢去泰山爬山。", "用户喜欢去黄山爬山。", 0.97, Action.NEW, None),
        # a rewording merges: the same people, values and most of the terms
        ("The user is allergic to peanuts.", "I'm allergic to peanuts", 0.8, Action.MERGE,
         "reworded (similarity 0.800, 100% of its terms shared)"),
        # ... but not a swap of the thing itself
        ("The user's cat is named Pepper", "The user's dog is named Pepper", 0.88, Action.NEW, None),
        # worded as a change of a fact on the same topic, far apart in wording
        ("I closed my Chase account and moved everything to Ally Bank", "I bank with Chase", 0.6,
         Action.SUPERSEDE, "worded as a change of it (similarity 0.600, about bank, chase)"),
        # ... and far apart in meaning too: the same facet of the user's life (domain/topics.py)
        ("I closed my Chase account and moved everything to Ally Bank", "I bank with Chase", 0.2,
         Action.SUPERSEDE, "same facet, worded as a change: bank"),
        # worded as a change of another facet: a new phone is not a new phone number
        ("I finally switched to an iPhone 15", "My phone number is 415-555-0182.", 0.3, Action.NEW, None),
        # a schedule that moved is a new version; another activity's is not
        ("The yoga class moved to Thursdays.", "The user's yoga class is on Tuesdays.", 0.5, Action.SUPERSEDE,
         "same slot, new value: schedule:yoga class 'tuesdays' -> 'thursdays'"),
        ("The user's piano lesson is on Thursdays.", "The user's yoga class is on Tuesdays.", 0.6,
         Action.NEW, None),
        # a number is of whom the words before it name: an estate office's, a father's; not the user's
        ("西湖花园物业电话0571-86675432", "滨江物业电话0571-88861234", 0.53, Action.NEW, None),
        ("陈家的紧急联系人是陈太太的妹妹，电话13606812277", "小王的紧急联系人是他爸，电话13805710021", 0.43,
         Action.NEW, None),
        ("物业电话改成了0571-86675432", "物业电话0571-88861234", 0.6, Action.SUPERSEDE,
         "same slot, new value: 物业's phone '057188861234' -> '057186675432'"),
        # two payments are two events, whatever changed between them
        ("周师傅换马桶收了450", "周师傅上次修水管收了300", 0.63, Action.NEW, None),
        ("小王2月房租2月5号交了", "小王1月房租1月5号交了", 0.96, Action.NEW, None),
        ("Paid the plumber £450 for the boiler", "Paid the plumber £300 for the leak", 0.8, Action.NEW, None),
        # "也是": another thing with the same value, not the same fact said again
        ("滨江那套月租也是3200", "朝阳路那套月租3200", 0.72, Action.NEW, None),
        # a bare 也 adds another one beside the first, unless a change is said beside it
        ("中行的预审批也下来了，110万", "工行预审批额度120万", 0.61, Action.NEW, None),
        ("凯文的店从这个月起周一也开门，改成周二休息。", "凯文的咖啡馆周一休息。", 0.64, Action.SUPERSEDE,
         None),
        # a first car, a car driven for five years: over, it replaces nothing
        ("我第一辆车是二手奇瑞QQ，开了五年", "现在开的是10年的宝来", 0.31, Action.NEW, None),
        ("My first car was a Corolla", "I drive a Honda Civic", 0.5, Action.NEW, None),
        # worded as a change, far apart: from cosine 0.25
        ("Switched Miso to Dr. Okafor's clinic, closer to the new flat", "My cat Miso's vet is Dr. Schneider",
         0.26, Action.SUPERSEDE, "worded as a change of it (similarity 0.260, about dr, miso)"),
        ("Switched Miso to Dr. Okafor's clinic, closer to the new flat", "My cat Miso's vet is Dr. Schneider",
         0.24, Action.NEW, None),
        ("Stopped amlodipine last week, BP's fine without it", "Takes amlodipine 5 mg each morning", 0.31,
         Action.SUPERSEDE, "worded as a change of it (similarity 0.310, about amlodipine)"),
        # ... but a person both name is not what they are about when each is of another facet of theirs
        ("My sister got married in June.", "The user's sister Anna lives in Porto.", 0.32, Action.NEW, None),
        # ... nor a unit both give a number of: two allowances
        ("招待客户吃饭人均上限 300 元，需要提前审批。", "出差餐补每天 150 元。", 0.32, Action.NEW, None),
        # a habit's verb is no change it told: the new one's change word is news
        ("换了充电式助听器，不用再买电池了。", "助听器电池每周换一次。", 0.73, Action.SUPERSEDE,
         "worded as a change of it (similarity 0.730, about 助听, 听器, 电池)"),
        # change words of bookings and tenancies
        ("Sanya flight rebooked to Dec 5, same airline, 7:15am", "Flight to Sanya: Dec 3, CZ6745, 9:40am",
         0.6, Action.SUPERSEDE, "worded as a change of it (similarity 0.600, about dec, flight, sanya)"),
        ("张老师退租了，西溪的房子现在空着。", "西溪那套房的租客是大学老师张先生。", 0.75, Action.SUPERSEDE,
         "worded as a change of it (similarity 0.750, about 老师, 西溪)"),
        # a reading: a new number of the holder's quantity replaces it, change word or not
        ("79.5 on the scale this morning", "User weighs 82 kg", 0.35, Action.SUPERSEDE,
         "same facet, a new value: weight"),
        ("今早称了一下，75.6。", "用户体重78公斤。", 0.25, Action.SUPERSEDE,
         "same facet, a new value: weight"),
        ("HbA1c came back at 6.9% on the March test", "Latest HbA1c: 7.8%", 0.52, Action.SUPERSEDE,
         "same facet, a new value: blood_sugar"),
        ("Dr Lim says my A1c goal is now below 6.5%", "My HbA1c target is under 7%", 0.6, Action.SUPERSEDE,
         "same facet, a new value: blood_sugar"),
        # ... not another's (what precedes the quantity), not a unit alone, not a moment's, not a target
        ("Leo weighs 31kg", "I weigh 77 kg", 0.6, Action.NEW, None),
        ("Tofu weighs 4.9 kg.", "Mochi weighs 5.8 kg.", 0.8, Action.NEW, None),
        ("乐乐体重31公斤", "体重77公斤", 0.7, Action.NEW, None),
        ("Wei's fasting glucose was 5.3 at his annual checkup.",
         "My fasting glucose came in at 7.2 at the annual checkup.", 0.8, Action.NEW, None),
        ("陈叔的排骨35一斤", "陈叔五花肉28一斤", 0.7, Action.NEW, None),
        ("BP yesterday evening 142 over 88", "Blood pressure this morning was 138/84", 0.7, Action.NEW, None),
        ("今天午饭后两小时血糖8.9。", "今天早上空腹血糖6.8。", 0.8, Action.NEW, None),
        ("Cardiologist's blood pressure target for me: under 130/80.", "BP 138/86.", 0.6, Action.NEW, None),
        ("目标体重75公斤。", "体重79.6公斤。", 0.8, Action.NEW, None),
        ("糖化血红蛋白6.1%。", "空腹血糖5.9。", 0.6, Action.NEW, None),
        ("浩然体重65.5公斤", "用户体重65.5公斤", 0.74, Action.NEW, None),  # the son's, not a rewording
        ("RHR averaged 52 over the last two weeks according to the Garmin.", "resting heart rate ~58 bpm",
         0.26, Action.SUPERSEDE, "same facet, a new value: fitness"),
        ("Uric acid came back at 430 this time, Dr. Fung is pleased.",
         "The user's uric acid was 520 µmol/L at her January check.", 0.37, Action.SUPERSEDE,
         "same facet, a new value: lab_value"),
        ("今早量了血压132/85，比之前好多了", "我最近血压145/92", 0.64, Action.SUPERSEDE,
         "same facet, a new value: blood_pressure"),
        ("Stepped on the scale after tai chi: 65.5 kg.", "The user weighs 68 kg.", 0.51, Action.SUPERSEDE,
         "same facet, a new value: weight"),
        # each fact its owner's: an opening possessive names whose it is
        ("Mia's nursery place from next January will be £1,150 a month",
         "Oliver's nursery fees: £620 a month", 0.5, Action.NEW, None),
        # a compound word is not a change word: 呼吸暂停 (apnoea), 改造 (renovation)
        ("我睡觉离不开CPAP，因为呼吸暂停", "用户有睡眠呼吸暂停，晚上要戴呼吸机", 0.57, Action.NEW, None),
        # a rewording shares what it is about, not only whose and when
        ("Dad's retirement dinner is on 3 October.", "Dad's birthday is 3 October.", 0.75, Action.NEW, None),
        # two readings each of its own month are two checkups
        ("Blood pressure was 131/84 at the GP visit in August.",
         "Blood pressure 124/78 at the September medical.", 0.64, Action.NEW, None),
        # a retired teacher is no retirement
        ("周六上午和一位里昂来的退休老师练法语口语", "法语课周四晚上在法国文化协会上", 0.55,
         Action.NEW, None),
        # this month's exception to a monthly habit
        ("This month he's skipping Skipton and doing Harrogate market on the 8th instead.",
         "Sells at Skipton farmers' market on the first Saturday of every month.", 0.51, Action.NEW, None),
        # next week's exception to a habit is not a change of it
        ("Next Thursday's workshop is cancelled; make-up session Saturday the 14th.",
         "Workshop meets Thursday evenings.", 0.59, Action.NEW, None),
        # a plan is not what is: "plans to hire 9", "has hired 4 now"
        ("佛山店目前已经招到4个人", "佛山店计划招9个人", 0.6, Action.NEW, None),
        # a year written in full and abridged is one value; another year is not
        ("the farm truck's that '18 Ram 2500", "Farm truck is a 2018 Ram 2500.", 0.81, Action.MERGE,
         "reworded (similarity 0.810, 67% of its terms shared)"),
        ("been in Hangzhou since '23, came over from Chengdu", "I moved from Chengdu to Hangzhou in 2023",
         0.8, Action.NEW, None),
        ("食品经营许可证续好了，新的有效期到2030年6月", "食品经营许可证2025年6月30日到期", 0.7,
         Action.SUPERSEDE, "similar (similarity 0.700), worded as a change, and a value differs: 2030"),
        # two kinds of doctor, however alike the rest
        ("Cardiologist: Dr. Huang at Zhejiang Provincial People's Hospital.",
         "Knee surgeon: Dr. Huang at Zhejiang Provincial People's Hospital.", 0.86, Action.NEW, None),
        # the same measure of the same thing, another number, a cue: a new version
        ("饼干现在一天遛三次，医生说它得减肥", "饼干每天遛两次", 0.5, Action.SUPERSEDE,
         "the same measure with another number (次; similarity 0.500)"),
        ("Signed the new Meituan contract, commission is 20% now",
         "Meituan takes 18% commission on our orders", 0.5, Action.SUPERSEDE,
         "the same measure with another number (%; similarity 0.500)"),
        # ... but another branch's count, or one measured without a cue, is another fact
        ("深圳店现在有8个人", "广州店有6个人", 0.7, Action.NEW, None),
        ("我每周跑步三次", "我每周游泳两次", 0.5, Action.NEW, None),
        # "another" is one more; a past event with its year is over
        ("just started another novel for them, 60k words",
         "I translated a 40k-word novel for Penguin China last year", 0.56, Action.NEW, None),
        ("I'm signed up for the Hangzhou half marathon this November", "I ran a half marathon in 2022", 0.5,
         Action.NEW, None),
        # preferences: one replaces the other
        ("The user now prefers coffee in the morning.", "The user prefers tea in the morning.", 0.7,
         Action.SUPERSEDE, "same preference, new value: 'tea' -> 'coffee'"),
        ("The user prefers green tea.", "The user prefers tea.", 0.9, Action.NEW, None),
    ],
)  # fmt: skip
def test_identity_slots_and_rewordings(
    new: str, old: str, similarity: float | None, action: Action, reason: str | None
) -> None:
    resolution = resolve(fact(new), [existing_fact("m-1", old, similarity)])
    assert resolution.action is action
    if reason is not None:
        assert resolution.reason == reason


def test_an_event_fills_no_slot() -> None:
    """ "Moved to Porto" as an event is something that happened, not an address that replaces one."""
    moved = replace(fact("The user moved to Porto."), kind=Kind.EVENT, tier=Tier.EPISODIC)
    earlier = replace(
        existing_fact("m-1", "The user moved to Lisbon.", 0.5), kind=Kind.EVENT, tier=Tier.EPISODIC
    )
    assert resolve(moved, [earlier]).action is Action.NEW


def test_a_structured_supersede_lists_what_changed() -> None:
    assert resolve(BOOKING, [WEDNESDAY]).changed == (("booking_date", "2026-12-02", "2026-12-04"),)


def test_value_keys_limit_what_makes_a_new_version() -> None:
    only_building = ConflictPolicy(value_keys=frozenset({"building"}))
    resolution = resolve(BOOKING, [replace(WEDNESDAY, similarity=0.5)], only_building)
    assert resolution.action is Action.NEW
    moved = replace(BOOKING, entities={**BOOKING.entities, "building": "B"})
    assert resolve(moved, [WEDNESDAY], only_building).changed == (("building", "A", "B"),)


def test_the_strongest_rule_wins_then_the_most_similar() -> None:
    duplicates = [existing_fact("far", "用户在杭州工作", 0.2), existing_fact("near", "用户在杭州工作", 0.9)]
    assert resolve(FACT, duplicates).target_id == "near"
    paraphrase = existing_fact("para", "用户在杭州上班", 0.99)
    exact = existing_fact("exact", "用户在杭州工作", None)
    assert resolve(FACT, [paraphrase, exact]).target_id == "exact"  # same content beats similarity


def test_the_same_fact_five_times_is_one_memory_counted_five_times() -> None:
    store: dict[str, tuple[Existing, int]] = {}
    for attempt in range(5):
        new = replace(FACT, content=["用户在杭州工作", "用户在杭州工作。", " 用户在杭州工作 "][attempt % 3])
        resolution = resolve(new, [memory for memory, _ in store.values()])
        if resolution.action is Action.MERGE:
            assert resolution.target_id is not None
            memory, count = store[resolution.target_id]
            store[resolution.target_id] = (memory, count + 1)
        else:
            assert resolution == Resolution(
                Action.NEW, None, "no active memory with the same subject, kind and tier matches"
            )
            store[f"m-{attempt}"] = (existing_fact(f"m-{attempt}", new.content, None), 1)
    assert [count for _, count in store.values()] == [5]


# A document of facet words (work, care, trips) in both languages, as a hostile tenant would write them.
_DOCUMENT = " ".join(["meeting budget travel Lisbon doctor dentist 会议 预算 出差 医生"] * 250)


def test_a_document_against_its_peers_is_read_by_rules_1_and_2_alone() -> None:
    """A write's rules are bounded whatever its peers hold: 16 KB against 20 peers of 16 KB read in full
    took 0.3-0.5 s of CPU. Long look-alikes that differ by a number stay two memories; the same document
    still merges, and a structured change still supersedes."""
    new = NewMemory("user-7", Kind.FACT, Tier.SEMANTIC, f"100 {_DOCUMENT}")
    peers = [existing_fact(f"m-{index}", f"{index} {_DOCUMENT}", 0.99) for index in range(20)]
    started = time.process_time()  # CPU time: a loaded CI core is not the rules' cost
    assert resolve(new, peers).action is Action.NEW
    assert time.process_time() - started < 0.05
    assert resolve(new, [*peers, existing_fact("same", new.content.upper(), 0.2)]).target_id == "same"
    long_booking = replace(BOOKING, content=f"{BOOKING.content} {_DOCUMENT}")
    long_wednesday = replace(WEDNESDAY, content=f"{WEDNESDAY.content} {_DOCUMENT}")
    assert resolve(long_booking, [long_wednesday]).action is Action.SUPERSEDE
    # A short fact beside a long one of its facet: the long one is not read either.
    assert (
        resolve(
            fact("I work at Acme now."), [existing_fact("doc", f"I work at Initech. {_DOCUMENT}", 0.9)]
        ).action
        is Action.NEW
    )
    assert fact_keys(_DOCUMENT).looks_for == ()
    assert fact_keys(_DOCUMENT[:200]).looks_for  # a short one is filed under its facets


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("Uses CSV.", "ｕｓｅｓ  ｃｓｖ", True),
        ("用户偏好CSV格式导出。", "用户偏好ＣＳＶ格式导出", True),
        ("用户偏好 CSV 格式", "用户偏好CSV格式", True),
        ("room 301", "room 302", False),
        ("用户偏好CSV", "用户偏好Excel", False),
    ],
)
def test_content_key(a: str, b: str, same: bool) -> None:
    assert (content_key(a) == content_key(b)) is same


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("用户偏好CSV格式导出", {"csv"}),
        ("会议改到周五下午3点，A栋", {"weekday:4", "time:afternoon", "3", "a"}),
        ("会议改到星期五下午三点，A栋", {"weekday:4", "time:afternoon", "3", "a"}),
        ("Takes it every night", {"time:night"}),  # a part of the day is a value
        ("早上吃药", {"time:morning"}),
        ("十个人", {"10"}),
        ("The user prefers Excel. Meeting on Friday at 15:00", {"excel", "weekday:4", "15"}),
        # one spelling per value: a whole hour, numbers in words, short weekdays, e-mail addresses
        ("Reminders at 8am", {"8"}),
        ("reminders at 8:00 AM", {"8"}),
        ("I have two kids on the fourth floor", {"2", "4"}),
        ("Works out Mon/Wed/Fri", {"weekday:0", "weekday:2", "weekday:4"}),
        ("My phone number is 415-555-0182.", {"4155550182"}),  # the groups at a sentence's end
        ("My work email is dana.r@acme.com.", {"dana.r@acme.com"}),
        ("用户一周去健身房三次", {"3"}),  # a lone 一 counts a thing, it is no value
        ("I live in Berlin", {"berlin"}),
        ("the user likes tea", set()),
    ],
)
def test_value_tokens(text: str, tokens: set[str]) -> None:
    assert value_tokens(text) == tokens


@pytest.mark.parametrize(
    ("merge_above", "supersede_from", "field"),
    [(1.5, 0.9, "merge_above"), (0.95, -0.1, "supersede_from"), (0.8, 0.9, "supersede_from")],
)
def test_policy_bounds(merge_above: float, supersede_from: float, field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        ConflictPolicy(merge_above=merge_above, supersede_from=supersede_from)
    assert error.value.field == field
