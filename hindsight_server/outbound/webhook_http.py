"""Delivers a webhook: resolves the endpoint's host, checks every address against the address policy
(domain/webhooks.py), and POSTs to the checked address itself, so that a name re-resolving to another
address between the check and the connection (DNS rebinding) changes nothing. The Host header and TLS's
server name (SNI, and so the certificate check) still carry the host.

No redirect is followed (a 3xx is a failed attempt), no proxy from the environment is used, and a
connection is never reused: connections are kept by address, and one opened to an address for one host
name must not carry another's request. An answer's body is read up to a bound and discarded.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping

import httpx2

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.webhooks import AddressPolicy, DeliveryOutcome, WebhookUrl

__all__ = ["WebhookSender"]

USER_AGENT = "hindsight-webhooks/1"


class WebhookSender:
    def __init__(
        self,
        policy: AddressPolicy,
        *,
        timeout_s: float,
        max_response_bytes: int,
        max_connections: int,
        ca_file: str = "",
    ) -> None:
        """`ca_file`: the CAs that prove endpoints' certificates (PEM); empty: the system's."""
        self._policy = policy
        self._timeout_s = timeout_s
        self._max_response_bytes = max_response_bytes
        self._client = httpx2.AsyncClient(
            verify=ssl.create_default_context(cafile=ca_file) if ca_file else True,
            trust_env=False,
            follow_redirects=False,
            timeout=timeout_s,
            limits=httpx2.Limits(max_connections=max_connections, max_keepalive_connections=0),
        )

    async def resolve(self, url: WebhookUrl, field: str = "url") -> str:
        """The address to connect to for `url`; InvalidArgument naming `field` when the host does not
        resolve or resolves to an address the policy refuses."""
        if _literal(url.host):
            return self._policy.check(url.host, [url.host], field)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout_s):
                infos = await loop.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as exc:
            raise InvalidArgument(field, f"host {url.host[:64]!r} does not resolve: {exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        return self._policy.check(url.host, addresses, field)

    async def post(self, url: WebhookUrl, headers: Mapping[str, str], body: bytes) -> DeliveryOutcome:
        """One attempt, within the timeout from resolution to the last byte read."""
        try:
            async with asyncio.timeout(self._timeout_s):
                address = await self.resolve(url)
                return await self._send(url, address, headers, body)
        except InvalidArgument as exc:  # the host moved to a refused address, or stopped resolving
            return DeliveryOutcome(0, exc.reason)
        except TimeoutError:
            return DeliveryOutcome(0, f"no answer within {self._timeout_s:g} s")
        except httpx2.HTTPError as exc:
            return DeliveryOutcome(0, f"{type(exc).__name__}: {exc}"[:300])

    async def _send(
        self, url: WebhookUrl, address: str, headers: Mapping[str, str], body: bytes
    ) -> DeliveryOutcome:
        request_headers = {
            **headers,
            "host": url.host_header,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
        }
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else None
        async with self._client.stream(
            "POST", url.with_address(address), content=body, headers=request_headers, extensions=extensions
        ) as response:
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= self._max_response_bytes:
                    break  # the rest is not read: the connection closes with the response
            if 200 <= response.status_code < 300:
                return DeliveryOutcome(response.status_code, "")
            return DeliveryOutcome(response.status_code, f"answered HTTP {response.status_code}")

    async def close(self) -> None:
        await self._client.aclose()


def _literal(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True
