"""The console against real parts: a memory server that requires API keys (PostgreSQL from the session
fixture), real keys made as `hindsight tenants create` makes them, the console itself on a free loopback
port in this process, and one headless Chromium (the distribution's `chromium` and `chromium-driver`,
installed by `make tools`) driven by selenium for the whole session.

Selenium blocks: every browser call goes through `Browser`, which runs it in a thread, so the event loop
that serves the console and the memory server keeps answering while the browser waits."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from console.config import load_console_settings
from console.server import ConsoleServer
from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.domain.principal import parse_scopes
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.process.offline import open_api_keys
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server

CHROMIUM = "/usr/bin/chromium"
_ALERT_PROBES = 5  # asks for an open alert at most this often while a page is replaced


def _replaced(page: Any) -> Callable[[Any], bool]:
    """A wait's condition: the page's root element no longer belongs to the document. Chrome answers a
    question about a node of a replaced document with a stale-element error or, at times, an inspector
    error ("Node with given id does not belong to the document"); both mean the page was replaced."""
    from selenium.common.exceptions import WebDriverException

    def gone(_driver: Any) -> bool:
        try:
            page.is_enabled()
        except WebDriverException:  # StaleElementReferenceException is one
            return True
        return False

    return gone


CHROMEDRIVER = "/usr/bin/chromedriver"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    api_key: str
    client: HindsightClient  # with the key: what the tests write, the console then shows


@pytest.fixture(scope="session")
async def keyed_memory_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    running = await start_server(make_settings(security__require_api_keys=True, security__api_key_cache_s=0))
    yield running
    await running.stop()


@pytest.fixture(scope="session")
def memory_target(keyed_memory_server: RunningServer) -> str:
    return f"127.0.0.1:{keyed_memory_server.port}"


@asynccontextmanager
async def running_console(memory_target: str, **settings: Any) -> AsyncIterator[str]:
    """A console on a free loopback port calling `memory_target`; yields its base URL."""
    server = ConsoleServer(
        load_console_settings(host="127.0.0.1", port=0, targets=(memory_target,), **settings)
    )
    url = await server.start()
    try:
        yield url.rstrip("/")
    finally:
        await server.stop()


@pytest.fixture(scope="session")
async def console_url(memory_target: str) -> AsyncIterator[str]:
    # Every test logs in from 127.0.0.1, some with wrong keys on purpose: the failed-login limit is
    # tested on a console of its own (test_http.py).
    async with running_console(memory_target, login_attempts_per_minute=1000) as url:
        yield url


@pytest.fixture(scope="session")
async def api_keys(make_settings: Callable[..., Settings]) -> AsyncIterator[ApiKeys]:
    """What `hindsight tenants create` uses, in this process (a subprocess per test costs seconds)."""
    async with open_api_keys(make_settings()) as keys:
        yield keys


@pytest.fixture
async def console_tenant(api_keys: ApiKeys, memory_target: str) -> AsyncIterator[Tenant]:
    """A tenant of its own for each test, with a key that may read, write, erase and see Ops/Status."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    key = await api_keys.create(
        name, "console test", scopes=parse_scopes(["read", "write", "erase", "admin"])
    )
    async with HindsightClient(memory_target, api_key=key.api_key, timeout_s=10) as client:
        yield Tenant(name, key.api_key, client)


class Browser:
    """The session's Chromium; each call runs in a thread (selenium blocks)."""

    def __init__(self, driver: Any, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url
        self.urls: list[str] = []  # every URL opened, to check what none of them holds
        self._left_page: Any = None  # the page a click left while its alert was open

    async def call(self, work: Callable[[], T]) -> T:
        return await asyncio.to_thread(work)

    async def open(self, path: str) -> None:
        await self.call(lambda: self.driver.get(self.base_url + path))
        self.urls.append(await self.current_url())

    async def current_url(self) -> str:
        return str(await self.call(lambda: self.driver.current_url))

    async def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return str(await self.call(lambda: self.driver.find_element(By.CSS_SELECTOR, css).text))

    async def texts(self, css: str) -> list[str]:
        from selenium.webdriver.common.by import By

        return await self.call(lambda: [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)])

    async def fill(self, css: str, value: str) -> None:
        from selenium.webdriver.common.by import By

        def work() -> None:
            element = self.driver.find_element(By.CSS_SELECTOR, css)
            element.clear()
            element.send_keys(value)

        await self.call(work)

    async def click(self, css: str, *, navigates: bool = True) -> None:
        """Clicks; when it `navigates`, returns once the next page replaced this one (or an alert it
        opened waits: alert_text() answers it, then waits for the page)."""
        from selenium.common.exceptions import NoAlertPresentException, WebDriverException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.wait import WebDriverWait

        def alert_open() -> bool:
            # Asked while the page is being replaced, Chrome can answer with an inspector error ("Node
            # with given id does not belong to the document") instead of "no such alert": ask again.
            for _ in range(_ALERT_PROBES):
                try:
                    self.driver.switch_to.alert  # noqa: B018 (asks whether one is open)
                except NoAlertPresentException:
                    return False
                except WebDriverException:
                    time.sleep(0.05)
                else:
                    return True
            return False

        def work() -> None:
            page = self.driver.find_element(By.TAG_NAME, "html")
            self.driver.find_element(By.CSS_SELECTOR, css).click()
            if not navigates:
                return
            if alert_open():
                self._left_page = page
            else:
                WebDriverWait(self.driver, 15).until(_replaced(page))

        await self.call(work)

    async def source(self) -> str:
        return str(await self.call(lambda: self.driver.page_source))

    async def alert_text(self) -> str | None:
        """The open alert's text, accepting it (and waiting for the page the click led to), or None."""
        from selenium.common.exceptions import NoAlertPresentException
        from selenium.webdriver.support.wait import WebDriverWait

        def work() -> str | None:
            try:
                alert = self.driver.switch_to.alert
            except NoAlertPresentException:
                return None
            text = str(alert.text)
            alert.accept()
            if self._left_page is not None:
                WebDriverWait(self.driver, 15).until(_replaced(self._left_page))
                self._left_page = None
            return text

        return await self.call(work)

    async def log_in(self, tenant: Tenant) -> None:
        await self.open("/login")
        await self.fill("#tenant", tenant.name)
        await self.fill("#api_key", tenant.api_key)
        await self.click("form[action='/login'] button[type=submit]")

    async def log_out(self) -> None:
        await self.call(self.driver.delete_all_cookies)

    async def screenshot(self, path: Path) -> None:
        """The whole page (up to 4000 px tall) at the window's width."""

        def work() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            size = self.driver.get_window_size()
            height = self.driver.execute_script("return document.documentElement.scrollHeight")
            self.driver.set_window_size(size["width"], min(max(int(height) + 140, size["height"]), 4000))
            try:
                self.driver.save_screenshot(str(path))
            finally:
                self.driver.set_window_size(size["width"], size["height"])

        await self.call(work)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("chromium and chromium-driver are missing: `make tools` as root (apt-get install them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"intl.accept_languages": "en-US,en"})
    # With the driver's path given, selenium-manager (which would download a driver or browser) never runs.
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
async def browser(chromium: Any, console_url: str) -> AsyncIterator[Browser]:
    """The session's browser, logged out before and after each test."""
    session = Browser(chromium, console_url)
    await session.log_out()
    yield session
    await session.log_out()
