"""The screenshots of docs/console/ (README.md shows them): every page at 1280 px, two on a phone, one
in Chinese, of a small demo tenant. Not part of a plain test run; made when asked:

    CONSOLE_SCREENSHOTS_DIR=docs/console .venv/bin/python -m pytest tests/console/test_screenshots.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.console.conftest import Browser, Tenant
from tests.support.memory_fields import MemoryFields

SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS_DIR", "")
BOOKING = MemoryFields(tier="episodic", kind="task", intent="book_meeting_room", subject="alice")

pytestmark = pytest.mark.skipif(not SCREENSHOTS, reason="set CONSOLE_SCREENSHOTS_DIR to make them")


async def _demo(tenant: Tenant) -> dict[str, str]:
    client, name = tenant.client, tenant.name
    ids: dict[str, str] = {}
    for text, kind in (
        ("prefers a window seat on long trains", "preference"),
        ("is allergic to peanuts", "fact"),
        ("用户偏好靠窗座位", "preference"),
        ("works at the Lyon office on Tuesdays", "fact"),
    ):
        ids[text] = (await client.write(name, text, tier="semantic", kind=kind, subject="alice")).memory.id
    await client.write(name, "book room A on Wednesday", entities={"date": "2026-12-02"}, **BOOKING)
    ids["booking"] = (
        await client.write(name, "book room A on Friday", entities={"date": "2026-12-04"}, **BOOKING)
    ).memory.id
    await client.write(name, "the 3rd floor has a kettle", tier="semantic", kind="fact", subject="bob")
    for text in ("maybe likes jazz", "maybe vegetarian", "<script>alert(1)</script> maybe hostile"):
        await client.write(name, text, tier="semantic", kind="preference", subject="alice", confidence=0.4)
    for query in ("window seat", "peanuts", "靠窗", "room booking"):
        await client.recall(name, query, subject="alice")
    return ids


async def test_screenshots_of_every_page(browser: Browser, console_tenant: Tenant) -> None:
    folder = Path(SCREENSHOTS)
    ids = await _demo(console_tenant)
    await browser.log_in(console_tenant)
    pages = {
        "subjects": "/memories",
        "memories": "/memories?subject=alice",
        "memory-history": f"/memories/{ids['booking']}",
        "recall": f"/recall?query=window+seat&subject=alice&expected={ids['is allergic to peanuts']}",
        "pending": "/pending",
        "erasure": "/erasure?subject=bob",
        "operations": "/ops",
    }
    for name, path in pages.items():
        await browser.open(path)
        await browser.screenshot(folder / f"{name}.png")
    await browser.open("/erasure")
    await browser.fill("#e-subject", "bob")
    await browser.fill("#e-confirm", "bob")
    await browser.fill("#e-reason", "GDPR art. 17, ticket 4711")
    await browser.click("#erasure-form button[type=submit]")
    assert await browser.alert_text() is not None
    await browser.screenshot(folder / "erasure-result.png")

    driver = browser.driver
    await browser.call(lambda: driver.execute_cdp_cmd("Network.enable", {}))
    await browser.call(
        lambda: driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": "zh-CN"}}
        )
    )
    try:
        await browser.open("/memories?subject=alice")
        await browser.screenshot(folder / "memories-zh.png")
    finally:
        await browser.call(lambda: driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}}))
    await browser.call(lambda: driver.set_window_size(390, 844))
    try:
        for name, path in (("phone-memories", "/memories?subject=alice"), ("phone-recall", pages["recall"])):
            await browser.open(path)
            await browser.screenshot(folder / f"{name}.png")
    finally:
        await browser.call(lambda: driver.set_window_size(1280, 900))
    assert await browser.call(lambda: len(list(folder.glob("*.png")))) >= 11
