"""TLS from the memory servers to the inference tier: a real tritonserver serving gRPC with a
certificate and requiring client certificates (mTLS), reached by the clients and by a memory server
configured with `inference.tls_*`; a plaintext client and one without a certificate are refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from embedder.__main__ import main as embedder_main
from embedder.client import TritonEmbedder
from embedder.errors import InferenceUnavailable
from embedder.repository import EmbedModelOptions, RepositoryOptions, build_repository
from embedder.triton import TritonOptions, TritonPorts, TritonServer, TritonTls
from hindsight.client import HindsightClient
from hindsight.tls import ClientTls
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.support.certs import SERVER_NAME, Pki, pki

TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return pki(tmp_path_factory.mktemp("triton-certs"))


@pytest.fixture(scope="module")
def tls_triton(tmp_path_factory: pytest.TempPathFactory, certs: Pki) -> Iterator[TritonServer]:
    work_dir = tmp_path_factory.mktemp("triton-tls")
    models = build_repository(work_dir / "models", RepositoryOptions(EmbedModelOptions(max_chars=400)))
    tls = TritonTls(certs.server_cert, certs.server_key, client_ca_file=certs.ca)
    server = TritonServer(
        TritonOptions(
            work_dir / "models", tuple(models), TritonPorts.free(), ready_timeout_s=60, grpc_tls=tls
        )
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _client_tls(certs: Pki, *, certificate: bool = True) -> ClientTls:
    if not certificate:
        return ClientTls(ca_file=str(certs.ca), server_name=SERVER_NAME)
    return ClientTls(str(certs.ca), str(certs.client_cert), str(certs.client_key), SERVER_NAME)


async def test_the_tier_answers_a_client_with_its_certificate_only(
    tls_triton: TritonServer, certs: Pki
) -> None:
    async with TritonEmbedder(tls_triton.grpc_url, tls=_client_tls(certs)) as client:
        result = await client.embed(["the user lives in Porto"], timeout_s=TIMEOUT_S)
        assert result.vectors.shape == (1, 512)
    for refused in (None, _client_tls(certs, certificate=False)):
        async with TritonEmbedder(tls_triton.grpc_url, tls=refused) as client:
            with pytest.raises(InferenceUnavailable):
                await client.embed(["the user lives in Porto"], timeout_s=TIMEOUT_S)


async def test_a_memory_server_embeds_and_recalls_over_mtls(
    make_settings: Callable[..., Settings], tls_triton: TritonServer, certs: Pki
) -> None:
    running = await start_server(
        make_settings(
            inference__url=tls_triton.grpc_url,
            inference__tls_ca_file=str(certs.ca),
            inference__tls_cert_file=str(certs.client_cert),
            inference__tls_key_file=str(certs.client_key),
            inference__tls_server_name=SERVER_NAME,
            inference__english_model="",
            inference__rerank_model="",
            inference__inline_budget_s=5.0,
        )
    )
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}") as client:
            written = await client.write("tls-tier", "the user lives in Porto", tier="semantic", kind="fact")
            assert written.memory.embedding_state == pb.EMBEDDING_STATE_READY  # embedded inline, over TLS
            found = await client.recall("tls-tier", "where is the user's home", min_score=0)
        (hit,) = found.hits
        assert hit.memory.id == written.memory.id
        assert pb.CHANNEL_VECTOR in [channel.channel for channel in hit.channels]  # the query too
    finally:
        await running.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grpc-tls-cert", "{cert}"], "--grpc-tls-cert and --grpc-tls-key go together"),
        (["--grpc-tls-client-ca", "{ca}"], "--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key"),
        (["--grpc-tls-cert", "{cert}", "--grpc-tls-key", "/no/such.key"], "/no/such.key: no such file"),
    ],
)
def test_serve_refuses_half_a_tls_configuration(
    certs: Pki, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    argv = ["serve", *(flag.format(cert=certs.server_cert, ca=certs.ca) for flag in flags)]
    with pytest.raises(SystemExit) as exited:
        embedder_main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err
