"""The hindsight memory server: its process start, command line, transport, pipelines and adapters."""

import os

# grpcio 1.81 and newer restart their poller thread in a forked child, which then aborts on the epoll
# descriptor that subprocess closes before exec (grpc/grpc#43055): a child that `hindsight up` starts, or
# a PostgreSQL a command runs, could die of SIGABRT before it ran. Nothing here forks to go on using gRPC
# in the child, so the fork handlers only add that risk. Read by grpc when it is first imported: set here,
# before any module of the server imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# One BLAS thread: a server's matrix products are small (a query against a held subject's vectors,
# domain/scope_index.py), and a second thread halves their time while nearly doubling their CPU (it
# spins waiting for work), on cores PostgreSQL and the inference tier share. Read when numpy is first
# imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS (OpenBLAS in its wheels)
