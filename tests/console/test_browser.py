"""The console in a real headless Chromium against a real memory server: what a person does with it,
and what it must never do (run a memory's markup, accept a forged form, show the key)."""

from __future__ import annotations

from hindsight.v1 import memory_pb2 as pb
from tests.console.conftest import Browser, Tenant
from tests.support.memory_fields import MemoryFields

BOOKING = MemoryFields(tier="episodic", kind="task", intent="book_meeting_room")


async def test_log_in_find_a_memory_and_open_its_history(browser: Browser, console_tenant: Tenant) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    first = await client.write(
        tenant, "book room A on Wednesday", entities={"date": "2026-12-02"}, subject="alice", **BOOKING
    )
    second = await client.write(
        tenant, "book room A on Friday", entities={"date": "2026-12-04"}, subject="alice", **BOOKING
    )
    await client.write(tenant, "the 3rd floor has a kettle", tier="semantic", kind="fact", subject="bob")
    assert second.memory.supersedes == first.memory.id, "the second booking replaces the first"

    await browser.log_in(console_tenant)
    assert (await browser.current_url()).endswith("/memories")
    subjects = await browser.texts("table.list tbody td a")
    assert set(subjects) == {"alice", "bob"}

    await browser.click("table.list tbody a[href*='subject=alice']")
    await browser.fill("#f-text", "friday")
    await browser.click("form.filters button[type=submit]")
    assert await browser.texts("table.memories td.content") == ["book room A on Friday"]

    await browser.click("table.memories td.content a")
    assert await browser.text("#memory-content") == "book room A on Friday"
    timeline = await browser.texts("#history li")
    assert len(timeline) == 2
    assert "book room A on Wednesday" in timeline[0] and "superseded" in timeline[0]
    assert "book room A on Friday" in timeline[1] and "active" in timeline[1]

    # What was believed just after the first booking was recorded: the first version.
    created = first.memory.created_at.ToDatetime()
    await browser.open(f"/memories/{second.memory.id}?as_of={created.isoformat()}")
    assert first.memory.id in await browser.text("#as-of-result")


async def test_a_recall_shows_its_channels_and_why_a_memory_was_not_returned(
    browser: Browser, console_tenant: Tenant
) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    window = await client.write(tenant, "prefers a window seat on trains", tier="semantic", kind="preference")
    unrelated = await client.write(tenant, "the invoice number is 4711", tier="semantic", kind="fact")
    await browser.log_in(console_tenant)
    await browser.open("/recall")
    await browser.fill("#r-query", "window seat")
    await browser.fill("#r-expected", unrelated.memory.id)
    await browser.click("#recall-form button[type=submit]")

    assert "prefers a window seat on trains" in await browser.text("#injection-text")
    hit = await browser.text(f"#hits li[data-memory-id='{window.memory.id}']")
    assert "lexical #1" in hit and "final" in hit and "similarity" in hit
    assert any(line.startswith("lexical:") for line in await browser.texts("#channel-candidates li"))
    why = await browser.text("#why-not")
    assert unrelated.memory.id in why
    assert "No channel returned it as a candidate" in why

    # The memory that was returned: its position, in the same words.
    await browser.fill("#r-expected", window.memory.id)
    await browser.click("#recall-form button[type=submit]")
    assert "It was returned, at position 1" in await browser.text("#why-not")


async def test_pending_memories_are_confirmed_one_by_one_and_rejected_in_bulk(
    browser: Browser, console_tenant: Tenant
) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    unsure = [
        (await client.write(tenant, text, tier="semantic", kind="preference", confidence=0.4)).memory
        for text in ("maybe likes jazz", "maybe vegetarian", "maybe left-handed")
    ]
    assert {m.status for m in unsure} == {pb.STATUS_PENDING}
    await browser.log_in(console_tenant)
    await browser.open("/pending")
    assert len(await browser.texts("#pending-form tbody tr")) == 3

    await browser.click(f"button[name=one][value='confirm:{unsure[0].id}']")
    assert "1 confirmed" in await browser.text(".flash")
    assert len(await browser.texts("#pending-form tbody tr")) == 2

    await browser.click("#select-all", navigates=False)  # console.js ticks every row
    await browser.click("button[name=action][value=reject]")
    assert "2 rejected" in await browser.text(".flash")
    assert await browser.text("#pending-none") == "Nothing is pending."
    statuses = [(await client.get(tenant, m.id)).status for m in unsure]
    assert statuses == [pb.STATUS_ACTIVE, pb.STATUS_DELETED, pb.STATUS_DELETED]


async def test_erasing_a_subject_needs_its_name_typed_and_shows_the_audit_record(
    browser: Browser, console_tenant: Tenant
) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    for text in ("carol lives in Lyon", "carol prefers tea"):
        await client.write(tenant, text, tier="semantic", kind="fact", subject="carol")
    await browser.log_in(console_tenant)
    await browser.open("/erasure")
    await browser.fill("#e-subject", "carol")
    await browser.fill("#e-confirm", "carl")
    await browser.click("#erasure-form button[type=submit]")
    assert await browser.alert_text() == "Erase subject carol? This cannot be undone."
    assert "type the subject's name exactly" in await browser.text("#erasure-error")
    assert len((await client.list(tenant, subject="carol")).memories) == 2  # nothing erased

    await browser.fill("#e-subject", "carol")
    await browser.fill("#e-confirm", "carol")
    await browser.fill("#e-reason", "ticket 4711")
    await browser.click("#erasure-form button[type=submit]")
    assert await browser.alert_text() is not None
    result = await browser.text("#erasure-result")
    assert "Audit record" in result and "2 memories" in result and "0 memories left" in result
    assert "carol" in await browser.text("#erasure-log")
    assert (await client.list(tenant, subject="carol", statuses=["active", "pending"])).memories == []


async def test_a_memory_holding_markup_is_shown_as_text_and_never_run(
    browser: Browser, console_tenant: Tenant
) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    written = await client.write(tenant, hostile, tier="semantic", kind="fact", subject="<b>mallory</b>")
    await browser.log_in(console_tenant)
    for path in ("/memories", "/memories?subject=%3Cb%3Emallory%3C%2Fb%3E", f"/memories/{written.memory.id}"):
        await browser.open(path)
        assert await browser.alert_text() is None, path
        assert "<script>" not in (await browser.source()).replace("&lt;script&gt;", ""), path
    assert await browser.text("#memory-content") == hostile
    await browser.open("/recall?query=alert")
    assert await browser.alert_text() is None
    assert hostile in await browser.text("#injection-text")


async def test_a_form_without_its_csrf_token_is_refused(browser: Browser, console_tenant: Tenant) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    pending = (
        await client.write(tenant, "maybe likes opera", tier="semantic", kind="fact", confidence=0.4)
    ).memory
    await browser.log_in(console_tenant)
    await browser.open("/pending")
    await browser.call(
        lambda: browser.driver.execute_script(
            "document.querySelector('#pending-form input[name=csrf]').value = 'forged'"
        )
    )
    await browser.click(f"button[name=one][value='confirm:{pending.id}']")
    assert "CSRF token missing or wrong" in await browser.text("#error-message")
    assert (await client.get(tenant, pending.id)).status == pb.STATUS_PENDING


async def test_the_key_is_in_no_url_page_or_cookie(browser: Browser, console_tenant: Tenant) -> None:
    await console_tenant.client.write(tenant := console_tenant.name, "a fact", tier="semantic", kind="fact")
    await browser.log_in(console_tenant)
    for path in ("/memories", "/memories?subject=", "/recall?query=fact", "/pending", "/erasure", "/ops"):
        await browser.open(path)
        assert console_tenant.api_key not in await browser.source(), path
    assert tenant in await browser.text(".who")
    assert all(console_tenant.api_key not in url for url in browser.urls)
    cookies = await browser.call(browser.driver.get_cookies)
    assert [c["name"] for c in cookies] == ["hindsight_console"]
    (cookie,) = cookies
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert console_tenant.api_key not in cookie["value"]


async def test_operations_draw_the_recall_latency_against_the_target(
    browser: Browser, console_tenant: Tenant
) -> None:
    await console_tenant.client.recall(console_tenant.name, "anything")
    await browser.log_in(console_tenant)
    await browser.open("/ops")
    await browser.open("/ops")  # a second sample for the line
    text = await browser.text("main")
    assert "target p99 80 ms" in text
    assert "Connection pool" in text and "Embedding backlog" in text
    polylines = await browser.call(
        lambda: len(browser.driver.find_elements("css selector", "svg.chart polyline.series"))
    )
    assert polylines >= 1


async def test_a_session_ends_when_logged_out(browser: Browser, console_tenant: Tenant) -> None:
    await browser.log_in(console_tenant)
    await browser.click("form.logout button")
    assert (await browser.current_url()).endswith("/login")
    await browser.open("/pending")
    assert (await browser.current_url()).endswith("/login")
