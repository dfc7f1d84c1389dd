"""What a fact is about (domain/facts.py): slots, identifiers, change cues, the people named."""

from __future__ import annotations

import time

import pytest

from hindsight_server.domain.facts import (
    MAX_FACT_CHARS,
    adds,
    dated,
    habitual,
    has_update_cue,
    historical,
    identifiers,
    measures,
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
    speaks_of_transactions,
    swapped,
    targets,
    topic_terms,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The user lives in Lisbon.", [("self", "residence", "lisbon", False)]),
        ("The user moved and now lives in Porto.", [("self", "residence", "porto", False)]),
        ("I moved from Lisbon to Porto last month", [("self", "residence", "porto", False)]),
        ("The user's sister lives in Berlin with her husband", [("sister", "residence", "berlin", False)]),
        ("The user's friend Tom lives in Leeds.", [("friend tom", "residence", "leeds", False)]),
        ("Caroline lives in Boston", [("caroline", "residence", "boston", False)]),
        ("These days the user lives in Rome", [("self", "residence", "rome", False)]),
        ("The user left Google and now works at Microsoft.", [("self", "employer", "microsoft", False)]),
        ("The user no longer works at Google", [("self", "employer", "google", True)]),
        ("The user works as a nurse.", [("self", "job", "nurse", False)]),
        ("The user studies computer science at MIT", [("self", "school", "mit", False)]),
        ("The user's phone number is +351 912 345 678", [("self", "phone", "+351912345678", False)]),
        ("My new number is 415-555-0199", [("self", "phone", "4155550199", False)]),
        ("The user's email is Bob@Example.com", [("self", "email", "bob@example.com", False)]),
        ("My favourite colour is blue.", [("self", "favourite:color", "blue", False)]),
        ("Her favorite color these days is purple", [("self", "favourite:color", "purple", False)]),
        ("I'm pescatarian now", [("self", "diet", "pescatarian", False)]),
        ("The user drives a Toyota Corolla", [("self", "vehicle", "toyota corolla", False)]),
        ("The user's wife is called Anna", [("self", "relation:spouse", "anna", False)]),
        ("The user is married to Maria", [("self", "relation:spouse", "maria", False)]),
        ("The user likes Italian food", []),  # many-valued: no slot
        ("The user's friend is called Anna", []),  # a person has many friends
        ("Order 3F9A0C21DE for the user ships to Porto next week", []),
        ("用户住在上海", [("self", "residence", "上海", False)]),
        ("用户搬家了，现在住在北京", [("self", "residence", "北京", False)]),
        ("我上个月搬到了苏州。", [("self", "residence", "苏州", False)]),
        ("用户不再住在上海了", [("self", "residence", "上海", True)]),
        ("用户的妹妹住在杭州", [("妹妹", "residence", "杭州", False)]),
        ("用户的朋友小张住在深圳。", [("朋友小张", "residence", "深圳", False)]),
        ("小王住在深圳", [("小王", "residence", "深圳", False)]),
        ("用户在阿里巴巴工作", [("self", "employer", "阿里巴巴", False)]),
        ("我现在在字节跳动工作。", [("self", "employer", "字节跳动", False)]),
        ("用户跳槽到了腾讯", [("self", "employer", "腾讯", False)]),
        ("用户的手机号是13812345678", [("self", "phone", "13812345678", False)]),
        ("我最喜欢的水果现在是芒果。", [("self", "favourite:水果", "芒果", False)]),
        ("用户吃素", [("self", "diet", "vegetarian", False)]),
        ("用户的车是一辆白色的特斯拉", [("self", "vehicle", "白色特斯拉", False)]),
        ("用户的老板换成了李总。", [("self", "relation:boss", "李总", False)]),
        ("用户和李娜结婚了", [("self", "relation:spouse", "李娜", False)]),
        ("用户在北京大学读书", [("self", "school", "北京大学", False)]),
        ("用户喜欢吃川菜。", []),
        # schedules, named by what they are for
        ("The user's yoga class is on Tuesdays", [("self", "schedule:yoga class", "tuesdays", False)]),
        (
            "My weekly standup was moved from 9:00 to 9:30.",
            [("self", "schedule:weekly standup", "9:30", False)],
        ),
        ("The review moved to Friday at 15:00", []),  # a thing moved in time is not a new home
        ("The meeting with Anna is on Monday", []),  # one meeting of many
        ("用户的瑜伽课在周二晚上", [("self", "schedule:瑜伽课", "周二晚上", False)]),
        ("瑜伽课从周二改到了周四", [("self", "schedule:瑜伽课", "周四", False)]),
        ("The user's sister moved to Chicago.", [("sister", "residence", "chicago", False)]),
    ],
)
def test_slots(text: str, expected: list[tuple[str, str, str, bool]]) -> None:
    assert [(s.holder, s.name, s.value, s.negated) for s in slots(text)] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Order 3F9A0C21DE for the user ships to Porto", {"3f9a0c21de"}),
        ("用户的订单3F9A0C21DE下周寄往杭州", {"3f9a0c21de"}),
        ("用户的订单号是88231，明天到货", {"88231"}),
        ("Ticket #4521 about the login bug is still open", {"4521"}),
        ("The user's booking 88231 is for two nights", {"88231"}),
        ("Invoice INV-20931 was paid on Monday", {"inv-20931"}),
        ("The user's phone number is 555-0134", set()),  # a value, not a name
        ("The review moved to Friday at 15:00", set()),
        ("The user has 2 cats", set()),
        ("每天早上吃二甲双胍500mg。", set()),  # a quantity, not a code
        ("Upgraded the laptop to 32GB of RAM", set()),
    ],
)
def test_identifiers(text: str, expected: set[str]) -> None:
    assert identifiers(text) == expected


@pytest.mark.parametrize(
    ("text", "any_cue", "strong"),
    [
        ("The user moved to Porto", True, True),
        ("The user is currently studying Japanese", True, False),  # "currently" restates as often
        ("My new number is 415-555-0199", True, False),
        ("The user prefers Excel", True, False),  # a preference: one value replaces another
        ("I quit smoking three months ago", True, True),
        ("The user lives in Lisbon", False, False),
        ("用户跳槽到了腾讯", True, True),
        ("Got engaged to Marcus last month!", True, True),
        ("用户已经戒烟三个月啦", True, True),  # spoken 啦 reads as 了
        ("用户本科毕业于武汉大学", False, False),  # where one graduated from: a fact, not a change
        ("用户今年夏天硕士毕业了", True, True),
        ("用户说原来那个号不用了", True, True),
        ("用户换了一辆车", True, True),
        ("我现在不跑步了", True, True),
        ("用户现在住在上海", True, False),
        ("用户住在上海", False, False),
        ("香菜真的接受不了", True, False),  # 不了: cannot, not "no longer" (a final 了 is a weak cue)
        ("早上必须来杯美式，不然干不了活", False, False),  # 不然: otherwise
        ("11点以后客户打电话我一律不接", False, False),  # after eleven, not "from now on"
        ("以后周末不加班了", True, True),
    ],
)
def test_update_cues(text: str, any_cue: bool, strong: bool) -> None:
    assert has_update_cue(text) is any_cue
    assert has_update_cue(text, strong=True) is strong


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The user's mom is allergic to shellfish", {"mother"}),
        ("My mother lives in Leeds", {"mother"}),
        ("我妈住在成都", {"mother"}),
        ("用户的妈妈住在成都", {"mother"}),
        ("The user's dog is named Rex", set()),  # pets are not people
        ("The user lives in Boston", set()),
    ],
)
def test_relations(text: str, expected: set[str]) -> None:
    assert relations(text) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("用户喜欢去黄山爬山。", "用户喜欢去泰山爬山。", True),
        ("The user's dog is named Pepper", "The user's cat is named Pepper", True),
        ("用户每天早上跑步。", "用户每天早上都跑步。", False),  # an insertion, not a swap
        ("The user plays the guitar.", "The user plays guitar.", False),
        ("I'm allergic to peanuts", "The user is allergic to peanuts", False),
    ],
)
def test_swapped(a: str, b: str, expected: bool) -> None:
    assert swapped(a, b) is expected


def test_topic_terms_fold_stems_and_drop_the_subject() -> None:
    assert {"major"} <= topic_terms("The user is majoring in biology") & topic_terms("switched majors")
    assert "user" not in topic_terms("The user lives in Lisbon")
    assert topic_terms("我对花生过敏") >= {"花生", "过敏"} and topic_terms("用户花生过敏") >= {"花生", "过敏"}


def test_preference_splits_holder_and_object() -> None:
    tea = preference("The user prefers tea in the mornings")
    assert tea is not None and tea.holder == "self" and tea.words == ("tea", "in", "morning")
    excel = preference("用户现在偏好Excel格式导出")
    assert excel is not None and "".join(excel.words) == "excel格式导出"
    assert preference("The user likes tea") is None


@pytest.mark.parametrize(
    "hostile",
    [
        "9" * 100_000,
        "a1" * 50_000,
        "lives in " * 20_000,
        "住在" * 50_000,
        "The user's sister's " * 10_000 + "lives in Lisbon",
        "@" * 50_000 + "a" * 50_000,
        "order " * 20_000,
    ],
    ids=["digits", "codes", "verbs", "zh-verbs", "holders", "at-signs", "identity-nouns"],
)
def test_hostile_text_costs_a_bounded_time(hostile: str) -> None:
    """Only the first MAX_FACT_CHARS characters are read, and no pattern backtracks without bound."""
    started = time.process_time()
    slots(hostile), identifiers(hostile), has_update_cue(hostile), relations(hostile), topic_terms(hostile)
    one_off(hostile), adds(hostile), profile_field(hostile), scope(hostile), replaces(hostile)
    (
        refers_back(hostile),
        historical(hostile),
        dated(hostile),
        habitual(hostile),
        speaks_of_transactions(hostile),
        measures(hostile),
        of_a_moment(hostile),
        targets(hostile),
        people_terms(hostile),
        owners(hostile),
    )
    assert time.process_time() - started < 1.0
    assert len(hostile) > MAX_FACT_CHARS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gym this friday is at 7pm instead, just this once", True),
        ("这周五健身改到晚上，就这一次。", True),
        ("Temporarily the standup is at 10", True),
        ("Just today the standup is at 10", False),  # one day named: dated, an exception only to a habit
        ("Goes to the gym every weekday at 6am.", False),
        ("每天早上六点去健身房。", False),
        ("中介说房东临时有事，看房改成周日下午三点", False),  # 临时有事: something came up
        ("这周五临时改到线上开", True),
    ],
)
def test_one_off(text: str, expected: bool) -> None:
    assert one_off(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I started drinking coffee too", True),
        ("儿子每周四下午还要去学游泳，五点开始。", True),
        ("User also has a cat named Miso", True),
        ("我被调到审计部了，还在适应中", False),  # 还在: still, not also
        ("Switched to coffee in the mornings", False),
        ("翠苑小区5栋1101周六也约了", True),  # a bare 也
        ("六级过了！再也不用刷真题了", False),  # 再也: never again
        ("上周升了高级设计师，工资也涨了", False),  # 也 beside a change: a side remark
        ("也许下周去看房", False),  # 也许: maybe
        ("can you do shift reminders at 6pm instead, 9 is too late", False),  # too late: excessively
        ("Me too.", True),
        ("just started another novel for them, 60k words", True),  # one more of a kind
        ("switched to another bank after the fees went up", False),  # a change, said with it
        ("Pete can only do Sundays now, he's got another job on Saturdays", False),  # what is true now
    ],
)
def test_adds(text: str, expected: bool) -> None:
    assert adds(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Time zone: Europe/Berlin", ("time zone", "Europe/Berlin")),
        ("时区：America/Los_Angeles", ("时区", "America/Los_Angeles")),
        ("常用邮箱：zhang.wei@163.com", ("常用邮箱", "zhang.wei@163.com")),
        ("User has a recurring 1:1 with Dana on Mondays", None),  # a colon inside a time
        ("The user said this to their manager: we ship on Friday", None),  # a sentence, not a key
        ("Reminder timezone US Eastern", None),
        ("Note: user files their own tax return", None),  # a note's label
        ("助手备注：用户是自由平面设计师", None),
    ],
)
def test_profile_field(text: str, expected: tuple[str, str] | None) -> None:
    assert profile_field(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("User prefers bullet-point answers for technical questions.", {"technical", "question"}),
        ("User prefers flowing paragraphs when asking for creative writing.", {"ask", "creative", "writ"}),
        ("聊育儿话题时，用户希望回答详细点。", {"聊育", "育儿", "儿话", "话题"}),
        ("User prefers short answers.", None),
        ("User works for Google", None),
    ],
)
def test_scope(text: str, expected: set[str] | None) -> None:
    found = scope(text)
    assert (found if found is None else set(found)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Switched to coffee in the mornings", True),
        ("用户最近周末开始学游泳。", False),  # starting something adds to it
        ("I started running", False),
        ("Started running and quit the gym", True),
    ],
)
def test_replaces(text: str, expected: bool) -> None:
    assert replaces(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("她辞职了，现在在一家互联网公司做产品。", True),
        ("他们搬到了杭州", False),  # they: not one person
        ("maya relocated to austin for her new job", True),
        ("User said they moved to Austin", False),  # notes write "they" for the user
    ],
)
def test_refers_back(text: str, expected: bool) -> None:
    assert refers_back(text) is expected


@pytest.mark.parametrize(
    ("text", "is_dated", "is_habit"),
    [
        ("gym this friday is at 7pm instead", True, False),
        ("下周三下午第三节临时改成班会", True, False),
        ("Goes to the gym every weekday at 6am.", False, True),
        ("每天下午四点半接儿子放学。", False, True),
        ("周三下午3点约了牙医", False, False),  # one appointment, neither
        ("Workshop meets Thursday evenings.", False, True),
        ("Next Thursday's workshop is cancelled; make-up session Saturday the 14th.", True, False),
        ("From next Monday the standup is at 10", False, False),  # a change from then on
        ("This month he's skipping Skipton", True, False),
        ("Starting this month the gym opens at 6", False, False),
    ],
)
def test_dated_and_habitual(text: str, is_dated: bool, is_habit: bool) -> None:
    assert (dated(text), habitual(text)) == (is_dated, is_habit)


@pytest.mark.parametrize(
    ("text", "moment", "target"),
    [
        ("My blood pressure this morning was 152/94.", True, False),
        ("BP yesterday evening 142 over 88", True, False),
        ("LDL cholesterol 3.9 mmol/L at the March checkup.", False, False),  # the next checkup replaces it
        ("今天午饭后两小时血糖8.9。", True, False),
        ("User weighs 82 kg.", False, False),
        ("用户体重78公斤。", False, False),
        ("My HbA1c target is under 7%.", False, True),
        ("doc's restriction: nothing heavier than ~18 kg", False, True),
        ("目标体重75公斤。", False, True),
        ("医生要我早上空腹控制在 4-7 mmol/L 之间。", True, True),
        ("佛山店计划招9个人", False, True),  # a plan, not what is
        ("今早量了血压132/85，比之前好多了", True, False),
    ],
)
def test_a_reading_of_a_moment_and_a_target(text: str, moment: bool, target: bool) -> None:
    assert (of_a_moment(text), targets(text)) == (moment, target)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Oliver's nursery fees: £620 a month", {"oliver"}),
        ("Mia's bedtime is around 9pm", {"mia"}),
        ("Switched Miso to Dr. Okafor's clinic", set()),  # a possessive further in: a value
        ("Mia goes to St Anne's Primary", set()),
        ("Today's plan: swim", set()),
        ("乐乐的体重31公斤", set()),
    ],
)
def test_owners_are_the_possessive_a_content_opens_with(text: str, expected: set[str]) -> None:
    assert owners(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("User lived in Austin for 4 years.", True),
        ("I used to work at Google", True),
        ("finally switched to a Pixel 8, still getting used to android", False),  # accustomed, not past
        ("奶奶2018年到2022年住在养老院。", True),
        ("退休前是中学语文老师。", False),
        ("User lives in Denver.", False),
        ("我以前住在上海", True),
        ("我第一辆车是二手奇瑞QQ，开了五年", True),
        ("在北京住了三年了", False),  # 了 at the end: still going on
        ("My first car was a Corolla", True),
        ("We ran a dairy here until 2012.", True),
        ("Margaret's renewed passport arrived, it's good till 2035", False),  # valid until: not over
        ("I ran a half marathon in 2022", True),  # an event over, with its year
        ("We moved to Porto in 2022", False),  # a change that lasts: where they live now
        ("我爸去年搬来上海跟我们一块住了", False),  # likewise
        ("I lived in Reno while I was driving OTR", True),  # the simple past: over
        ("I've lived in Reno since 2019", False),  # the perfect: goes on
        ("previous tenant's deposit was £1,000, returned in full", True),  # who held it before
        ("上一任房客的押金4200已经退给他了", True),
    ],
)
def test_historical(text: str, expected: bool) -> None:
    assert historical(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("俺妈说奶奶理疗改到礼拜四上午了", {"奶奶"}),  # the mother passed it on: it is the grandmother's
        ("Mom says Grandma's PT is on Thursdays", {"grandmother"}),
        ("换了iPhone 15，华为给我妈用了", set()),  # the phone went to the mother: still the user's fact
        ("我妈每天吃二甲双胍", {"mother"}),
    ],
)
def test_relations_leave_out_sources_and_recipients(text: str, expected: set[str]) -> None:
    assert relations(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("down to 77kg 💪 the diet worked", {("kg", 77.0)}),
        ("体重105公斤", {("kg", 105.0)}),  # one name per measure, whatever the language
        ("SZ is 8 people now, 8 staff", {("people", 8.0)}),
        ("饼干现在一天遛三次", {("次", 3.0)}),
        ("译言那边谈下来了，千字220", {("千字", 220.0)}),
        ("eleme rate is 19% from this billing cycle", {("%", 19.0)}),
        ("Order 7781 ships Monday", set()),  # a bare number measures nothing
    ],
)
def test_measures(text: str, expected: set[tuple[str, float]]) -> None:
    assert measures(text) == expected
