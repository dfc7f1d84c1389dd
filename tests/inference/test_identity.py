"""Facts that look alike stay distinct, real updates supersede: the conflict rules through the real
server, with real embeddings (domain/facts.py, domain/conflicts.py, bench/conflicts.py)."""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hindsight.client import HindsightClient
from hindsight_server.bench.conflicts import CASES_FILE, load_cases, report, run_conflict_bench
from hindsight_server.process.running import RunningServer
from tests.support.memory_fields import MemoryFields

FACT: MemoryFields = {"tier": "semantic", "kind": "fact"}


@pytest.fixture(scope="module")
async def client(tier_server: RunningServer) -> AsyncIterator[HindsightClient]:
    """On a server with the real inference tier: the rules see real similarities, as in production."""
    async with HindsightClient(f"127.0.0.1:{tier_server.port}", timeout_s=30) as shared:
        yield shared


async def test_the_labelled_cases_meet_the_targets(tier_server: RunningServer) -> None:
    """The shipped table: 60 true updates, 55 true duplicates, 60 look-alikes, English and Chinese."""
    scores = await run_conflict_bench(f"127.0.0.1:{tier_server.port}", load_cases())
    print(report(scores, as_json=False))
    assert scores.cases >= 170
    assert scores.precision["supersede"] >= 0.95 and scores.recall["supersede"] >= 0.8, scores.wrong
    assert scores.precision["merge"] >= 0.95, scores.wrong
    assert scores.confusion["new"]["new"] == sum(scores.confusion["new"].values()), scores.wrong


BLIND_TABLES = sorted(CASES_FILE.parent.glob("conflict_cases_blind_*.tsv"))


@pytest.mark.parametrize("table", BLIND_TABLES, ids=[path.stem.rsplit("_", 1)[-1] for path in BLIND_TABLES])
async def test_the_tables_written_blind_keep_look_alikes_apart(
    tier_server: RunningServer, table: Path
) -> None:
    """Each table written blind (hindsight_server/bench/, BENCHMARKS.md), its look-alikes only: a wrong
    supersede or merge of one hides a true fact. At most one of a table's 50-60 is lost (D and F lose
    one today); precision and recall over whole tables are `hindsight bench conflicts`' figures."""
    look_alikes = [case for case in load_cases(table) if case.expected == "new"]
    scores = await run_conflict_bench(f"127.0.0.1:{tier_server.port}", look_alikes)
    assert len(look_alikes) >= 50
    assert scores.confusion["new"]["new"] >= len(look_alikes) - 1, scores.wrong


def test_a_malformed_case_table_is_named(tmp_path: Path) -> None:
    table = tmp_path / "cases.tsv"
    table.write_text("# comment\nsupersede\tonly two fields\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cases.tsv:2: expected 'supersede\|merge\|new"):
        load_cases(table)


async def test_an_update_finds_its_fact_among_many_by_slot(client: HindsightClient, tenant: str) -> None:
    """ "Moved to Porto" supersedes "lives in Lisbon" even when 60 other facts of the user are nearer
    in meaning: the write finds the earlier fact by its slot, not only among the nearest."""
    subject = "user-1"
    lisbon = await client.write(tenant, "The user lives in Lisbon.", subject=subject, **FACT)
    for index in range(60):
        await client.write(
            tenant, f"The user moved the meeting number {index} to another room.", subject=subject, **FACT
        )
    moved = await client.write(
        tenant, "We finally moved: the user now lives in Porto.", subject=subject, **FACT
    )
    assert moved.resolution == "superseded", moved.resolution_reason
    assert moved.memory.supersedes == lisbon.memory.id
    assert "residence 'lisbon' -> 'porto'" in moved.resolution_reason


def _code(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(8)) + str(
        rng.randrange(10, 99)
    )


async def test_two_hundred_look_alike_orders_stay_distinct_and_each_is_found(
    client: HindsightClient, tenant: str
) -> None:
    """200 facts of one user that differ only by an order id (100 English, 100 Chinese): all created, and a
    question naming an id finds its order in the top 3."""
    rng = random.Random(22)
    cities = ["Porto", "Lisbon", "Berlin", "Madrid"]
    zh_cities = ["杭州", "南京", "成都", "苏州"]
    orders: dict[str, str] = {}
    for index in range(200):
        code = _code(rng)
        while code in orders:
            code = _code(rng)
        english = index % 2 == 0
        content = (
            f"Order {code} for the user ships to {cities[index % 4]} next week."
            if english
            else f"用户的订单{code}下周寄往{zh_cities[index % 4]}。"
        )
        written = await client.write(tenant, content, subject="user-1", **FACT)
        assert written.resolution == "created", (content, written.resolution_reason)
        orders[code] = written.memory.id
    missed = []
    for position, (code, memory_id) in enumerate(orders.items()):
        question = f"Where does order {code} ship to?" if position % 2 == 0 else f"订单{code}寄到哪里？"
        response = await client.recall(tenant, question, subject="user-1", top_k=3)
        if memory_id not in [hit.memory.id for hit in response.hits]:
            explained = await client.recall(tenant, question, subject="user-1", top_k=10, explain=True)
            found = [
                (hit.memory.content[:40], round(hit.components.exact_evidence, 2), round(hit.score, 3))
                for hit in explained.hits
            ]
            missed.append(f"{question} -> {found}")
    assert not missed, f"{len(missed)} of 200 orders not in the top 3 by their id: {missed[:10]}"


# One person's memory, fact after fact: (content, the earlier content it must supersede, or None). Each is
# met by every earlier fact of the subject, so a rule that fires on a pair too easily shows here.
LIFE = (
    ("The user lives in Lisbon.", None),
    ("I work at Deloitte as an auditor.", None),
    ("The user's sister Anna lives in Porto.", None),
    ("I'm single.", None),
    ("My phone number is 415-555-0182.", None),
    ("The user drives a 2015 Honda Civic.", None),
    ("I like green tea in the morning.", None),
    ("The user moved the weekly meeting to Friday.", None),
    ("My team moved to the 5th floor.", None),
    ("I started learning the guitar.", None),
    ("My sister got married in June.", None),
    ("I switched to an iPhone 15.", None),
    ("The user's mother-in-law lives in Austin.", None),
    ("My work email is dana.r@acme.com.", None),
    ("My personal email is dana.r@gmail.com.", None),
    ("I started drinking coffee too.", None),
    ("Got engaged to Marcus last month!", "I'm single."),
    ("New number, please update it: 628-555-0147.", "My phone number is 415-555-0182."),
    ("Traded the old car in for a Tesla Model 3 yesterday.", "The user drives a 2015 Honda Civic."),
)
# The same in Chinese, another user: "我住在上海" after "lives in Lisbon" would be the user's own move.
LIFE_ZH = (
    ("我住在上海浦东。", None),
    ("我妈住在哈尔滨。", None),
    ("用户每天抽一包烟。", None),
    ("会议改到了周五下午。", None),
    ("我妈搬来苏州跟我们一起住了。", "我妈住在哈尔滨。"),
    ("去年年底就把烟戒了。", "用户每天抽一包烟。"),
)


async def test_a_life_written_fact_by_fact_keeps_what_is_distinct(
    client: HindsightClient, tenant: str
) -> None:
    """Every true update supersedes its own fact and nothing else is superseded, though each fact meets
    all the earlier ones: a look-alike (a sister's home, a work and a personal e-mail), a fact worded as a
    change of something else (a meeting or a team that moved, a new phone), an addition (coffee too)."""
    ids: dict[str, str] = {}
    for subject, content, replaces in [("user-en", *fact) for fact in LIFE] + [
        ("user-zh", *f) for f in LIFE_ZH
    ]:
        written = await client.write(tenant, content, subject=subject, **FACT)
        ids[content] = written.memory.id
        if replaces is None:
            assert written.resolution == "created", (content, written.resolution_reason)
        else:
            assert written.resolution == "superseded", (content, written.resolution_reason)
            assert written.memory.supersedes == ids[replaces], (content, written.resolution_reason)
