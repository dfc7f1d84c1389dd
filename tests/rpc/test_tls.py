"""TLS and mTLS between the clients and a real memory server, with a throwaway CA: the shared client and
the CLI's commands reach a server that listens with TLS, and one that requires client certificates;
plaintext, an untrusted CA, a wrong name and a missing or foreign client certificate are refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight.tls import ClientTls
from hindsight_server.config import ConfigError, Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.support.certs import SERVER_NAME, Pki, pki, server_tls
from tests.support.processes import run_cli


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
async def tls_server(make_settings: Callable[..., Settings], certs: Pki) -> AsyncIterator[RunningServer]:
    running = await start_server(make_settings(**server_tls(certs, client_certificates=False)))
    yield running
    await running.stop()


@pytest.fixture(scope="module")
async def mtls_server(make_settings: Callable[..., Settings], certs: Pki) -> AsyncIterator[RunningServer]:
    running = await start_server(make_settings(**server_tls(certs, client_certificates=True)))
    yield running
    await running.stop()


def _client_of(certs: Pki) -> ClientTls:
    return ClientTls(ca_file=str(certs.ca), cert_file=str(certs.client_cert), key_file=str(certs.client_key))


async def _refused(target: str, tls: ClientTls | None, tenant: str) -> grpc.StatusCode:
    async with HindsightClient(target, timeout_s=3, tls=tls) as client:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await client.recall(tenant, "anything")
    return failed.value.code()


async def test_the_shared_client_speaks_tls_to_a_server_that_listens_with_it(
    tls_server: RunningServer, certs: Pki, tenant: str
) -> None:
    target = f"127.0.0.1:{tls_server.port}"
    async with HindsightClient(target, tls=ClientTls(ca_file=str(certs.ca))) as secure:
        written = await secure.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
        assert (await secure.get(tenant, written.memory.id)).content == "用户偏好靠窗座位"
    # By another name than the address: the one the certificate carries.
    named = ClientTls(ca_file=str(certs.ca), server_name=SERVER_NAME)
    async with HindsightClient(target, tls=named) as secure:
        assert (await secure.get(tenant, written.memory.id)).content == "用户偏好靠窗座位"
    assert await _refused(target, None, tenant) == grpc.StatusCode.UNAVAILABLE  # plaintext
    assert await _refused(target, ClientTls(), tenant) == grpc.StatusCode.UNAVAILABLE  # system CAs only
    wrong_name = ClientTls(ca_file=str(certs.ca), server_name="elsewhere.hindsight.test")
    assert await _refused(target, wrong_name, tenant) == grpc.StatusCode.UNAVAILABLE


async def test_a_server_with_a_client_ca_serves_only_clients_with_its_certificates(
    mtls_server: RunningServer, certs: Pki, tenant: str
) -> None:
    target = f"127.0.0.1:{mtls_server.port}"
    async with HindsightClient(target, tls=_client_of(certs)) as secure:
        written = await secure.write(tenant, "over mTLS", tier="semantic", kind="fact")
        assert written.created
    no_certificate = ClientTls(ca_file=str(certs.ca))
    assert await _refused(target, no_certificate, tenant) == grpc.StatusCode.UNAVAILABLE
    stranger = ClientTls(str(certs.ca), str(certs.stranger_cert), str(certs.stranger_key))
    assert await _refused(target, stranger, tenant) == grpc.StatusCode.UNAVAILABLE
    assert await _refused(target, None, tenant) == grpc.StatusCode.UNAVAILABLE


async def test_every_cli_command_takes_the_same_tls_options(
    mtls_server: RunningServer, certs: Pki, tenant: str
) -> None:
    target = f"127.0.0.1:{mtls_server.port}"
    tls = ["--tls-ca-file", str(certs.ca), "--tls-cert-file", str(certs.client_cert)]
    tls += ["--tls-key-file", str(certs.client_key), "--tls-server-name", SERVER_NAME]
    common = ["--target", target, "--tenant", tenant, *tls]
    written = await run_cli(["write", *common, "--content", "CLI over mTLS", "--tier", "semantic",
                             "--kind", "fact", "--json"])  # fmt: skip
    assert written.code == 0, written.stderr
    recalled = await run_cli(["recall", *common, "--query", "CLI over mTLS", "--json"])
    assert recalled.code == 0, recalled.stderr
    assert "CLI over mTLS" in recalled.stdout
    exported = await run_cli(["export", *common])
    assert exported.code == 0, exported.stderr
    assert "CLI over mTLS" in exported.stdout
    status = await run_cli(["status", "--target", target, "--json", *tls])
    assert status.code == 0, status.stderr
    assert json.loads(status.stdout)["servers"][0]["serving"] == "SERVING"
    # The same options from the environment, the way a deployment's CLI is configured.
    env = {"HINDSIGHT_TLS_CA_FILE": str(certs.ca), "HINDSIGHT_TLS_CERT_FILE": str(certs.client_cert),
           "HINDSIGHT_TLS_KEY_FILE": str(certs.client_key)}  # fmt: skip
    from_env = await run_cli(["get", "--target", target, "--tenant", tenant,
                              json.loads(written.stdout)["id"]], env=env)  # fmt: skip
    assert from_env.code == 0, from_env.stderr
    refused = await run_cli(["recall", "--target", target, "--tenant", tenant, "--query", "x",
                             "--tls-ca-file", str(certs.ca), "--timeout", "3"])  # fmt: skip
    assert refused.code != 0 and "UNAVAILABLE" in refused.stderr
    half = await run_cli(["recall", "--target", target, "--tenant", tenant, "--query", "x",
                          "--tls-cert-file", str(certs.client_cert)])  # fmt: skip
    assert half.code != 0 and "needs its key" in half.stderr


def test_client_certificates_need_the_servers_own_certificate(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ConfigError, match="tls_client_ca_file"):
        make_settings(security__tls_client_ca_file="/some/ca.pem")


def test_a_client_certificate_needs_its_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs its key"):
        ClientTls(cert_file=str(tmp_path / "client.crt"))
