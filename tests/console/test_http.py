"""The console over real HTTP (httpx2), no browser: its headers, its login, its bounds on every input,
its languages. The memory server is the keyed one of conftest.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import grpc
import httpx2
import pytest

from console.web import CSP
from tests.console.conftest import Tenant, running_console


@pytest.fixture
async def http(console_url: str) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=console_url, follow_redirects=False, timeout=10) as client:
        yield client


async def _log_in(http: httpx2.AsyncClient, tenant: str, api_key: str) -> httpx2.Response:
    form = await http.get("/login")
    token = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
    assert token is not None
    return await http.post(
        "/login", data={"login_csrf": token.group(1), "tenant": tenant, "api_key": api_key}
    )


async def _csrf(http: httpx2.AsyncClient) -> str:
    page = await http.get("/erasure")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    return token.group(1)


async def test_every_response_carries_the_strict_headers(http: httpx2.AsyncClient) -> None:
    for path in ("/login", "/static/console.css", "/nowhere", "/memories"):
        response = await http.get(path)
        assert response.headers["content-security-policy"] == CSP, path
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-frame-options"] == "DENY"
    assert (await http.get("/login")).headers["cache-control"] == "no-store"
    assert (await http.get("/memories")).headers["location"] == "/login"  # not logged in
    assert (await http.get("/healthz")).text == "ok"


async def test_login_refuses_a_wrong_key_and_sets_a_strict_cookie(
    http: httpx2.AsyncClient, console_tenant: Tenant
) -> None:
    refused = await _log_in(http, console_tenant.name, "hs_nope_nope")
    assert refused.status_code == 401
    assert "The memory server refused this key" in refused.text
    other = await _log_in(http, f"{console_tenant.name}-other", console_tenant.api_key)
    assert other.status_code == 401 and "another tenant" in other.text

    accepted = await _log_in(http, console_tenant.name, console_tenant.api_key)
    assert (accepted.status_code, accepted.headers["location"]) == (303, "/memories")
    cookie = next(c for c in accepted.headers.get_list("set-cookie") if c.startswith("hindsight_console="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert console_tenant.api_key not in cookie
    assert "Secure" not in cookie  # plain HTTP on loopback; HTTPS or cookie_secure adds it


async def test_the_login_form_needs_its_own_token(http: httpx2.AsyncClient, console_tenant: Tenant) -> None:
    forged = await http.post(
        "/login", data={"login_csrf": "x", "tenant": console_tenant.name, "api_key": console_tenant.api_key}
    )
    assert forged.status_code == 403
    assert "hindsight_console=" not in forged.headers.get("set-cookie", "")


async def test_failed_logins_are_throttled_per_address(memory_target: str, console_tenant: Tenant) -> None:
    async with (
        running_console(memory_target, login_attempts_per_minute=3) as url,
        httpx2.AsyncClient(base_url=url, timeout=10) as http,
    ):
        codes = [(await _log_in(http, console_tenant.name, "hs_bad_guess")).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]
        # Even the right key waits out the minute: the form is no oracle.
        assert (await _log_in(http, console_tenant.name, console_tenant.api_key)).status_code == 429


async def test_posts_without_the_sessions_csrf_token_are_refused(
    http: httpx2.AsyncClient, console_tenant: Tenant
) -> None:
    await console_tenant.client.write(
        console_tenant.name, "dave likes tea", tier="semantic", kind="fact", subject="dave"
    )
    await _log_in(http, console_tenant.name, console_tenant.api_key)
    for data in (
        {"subject": "dave", "confirmation": "dave"},
        {"csrf": "", "subject": "dave", "confirmation": "dave"},
    ):
        refused = await http.post("/erasure", data=data)
        assert refused.status_code == 403
        assert "CSRF token missing or wrong" in refused.text
    assert len((await console_tenant.client.list(console_tenant.name, subject="dave")).memories) == 1
    # Another session's token is no good either.
    async with httpx2.AsyncClient(base_url=str(http.base_url), timeout=10) as other:
        await _log_in(other, console_tenant.name, console_tenant.api_key)
        foreign = await _csrf(other)
    refused = await http.post("/erasure", data={"csrf": foreign, "subject": "dave", "confirmation": "dave"})
    assert refused.status_code == 403


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/memories?subject=a&page_size=7", "page_size"),
        ("/memories?subject=a&page_size=99999999999999", "page_size"),
        ("/memories?subject=a&tier=cosmic", "tier"),
        ("/memories?subject=a&status=gone", "status"),
        ("/memories?subject=a&since=yesterday", "since"),
        ("/memories?subject=a&since=2026-03-02T00:00&until=2026-03-01T00:00", "until"),
        (f"/memories?subject=a&text={'x' * 201}", "text"),
        (f"/memories?subject={'s' * 257}", "subject"),
        ("/memories/not%20an%20id", "id"),
        (f"/recall?query={'q' * 4001}", "query"),
        ("/recall?query=x&top_k=101", "top_k"),
        ("/recall?query=x&budget=-1", "budget"),
        ("/recall?query=x&expected=%3Cscript%3E", "expected"),
    ],
)
async def test_hostile_inputs_get_a_clear_error_naming_the_field(
    http: httpx2.AsyncClient, console_tenant: Tenant, path: str, field: str
) -> None:
    await _log_in(http, console_tenant.name, console_tenant.api_key)
    response = await http.get(path)
    assert response.status_code == 400, response.text
    assert re.search(rf'id="error-message">{field}: ', response.text), response.text


async def test_oversized_and_overfull_forms_are_refused(
    http: httpx2.AsyncClient, console_tenant: Tenant
) -> None:
    await _log_in(http, console_tenant.name, console_tenant.api_key)
    csrf = await _csrf(http)
    too_large = await http.post("/pending", data={"csrf": csrf, "action": "confirm", "pad": "x" * 70_000})
    assert too_large.status_code == 400 and "form: larger than 64 KiB" in too_large.text
    too_many = "&".join(f"ids=00000000-0000-7000-8000-{i:012d}" for i in range(201))
    refused = await http.post(
        "/pending",
        content=f"csrf={csrf}&action=reject&{too_many}",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert refused.status_code == 400 and "ids: at most 200 memories at once" in refused.text


async def test_the_interface_follows_the_browsers_language_and_content_stays_as_written(
    http: httpx2.AsyncClient, console_tenant: Tenant
) -> None:
    english = await http.get("/login", headers={"accept-language": "en-GB,zh;q=0.5"})
    assert "API key" in english.text and '<html lang="en">' in english.text
    chinese = await http.get("/login", headers={"accept-language": "zh-CN,zh;q=0.9,en;q=0.8"})
    assert "API 密钥" in chinese.text and '<html lang="zh-CN">' in chinese.text

    await console_tenant.client.write(
        console_tenant.name, "user prefers aisle seats", tier="semantic", kind="preference"
    )
    await _log_in(http, console_tenant.name, console_tenant.api_key)
    page = await http.get("/memories?subject=", headers={"accept-language": "zh-TW"})
    assert "的记忆" in page.text and "user prefers aisle seats" in page.text


async def test_an_unknown_memory_and_an_unknown_page_are_pages_not_tracebacks(
    http: httpx2.AsyncClient, console_tenant: Tenant
) -> None:
    await _log_in(http, console_tenant.name, console_tenant.api_key)
    missing = await http.get("/memories/01a22b8a-0000-7000-8000-000000000000")
    assert missing.status_code == 404 and "NOT_FOUND" in missing.text
    assert (await http.get("/nowhere")).status_code == 404


async def test_named_memories_are_erased_after_their_number_is_typed(
    http: httpx2.AsyncClient, console_tenant: Tenant
) -> None:
    client, tenant = console_tenant.client, console_tenant.name
    written = [
        (await client.write(tenant, text, tier="semantic", kind="fact")).memory.id
        for text in ("erin's old address", "erin's old phone", "erin likes tea")
    ]
    await _log_in(http, tenant, console_tenant.api_key)
    prefilled = await http.get(f"/erasure?ids={written[0]}")
    assert f">{written[0]}</textarea>" in prefilled.text
    csrf = await _csrf(http)
    form = {"csrf": csrf, "scope": "memories", "ids": f"{written[0]}, {written[1]}", "reason": "ticket 9"}
    refused = await http.post("/erasure", data={**form, "confirmation": "3"})
    assert refused.status_code == 400
    assert "confirmation: type the number of memories to erase (2)." in refused.text
    assert (await client.get(tenant, written[0])).content == "erin's old address"  # nothing erased

    erased = await http.post("/erasure", data={**form, "confirmation": "2"})
    assert erased.status_code == 200
    assert "Erased: 2 memories" in erased.text and "0 of them can still be read" in erased.text
    assert "2 memories, 0 sessions" in erased.text
    for memory_id in written[:2]:
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await client.get(tenant, memory_id)
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await client.get(tenant, written[2])).content == "erin likes tea"
    bad = await http.post("/erasure", data={**form, "ids": "../../etc", "confirmation": "1"})
    assert bad.status_code == 400 and "ids: a memory id" in bad.text
