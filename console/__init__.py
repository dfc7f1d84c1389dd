"""hindsight's web console: server-rendered pages over the memory servers' gRPC API (never SQL).

`hindsight console` serves it (default http://127.0.0.1:8766); `make up` starts it with the stack. See
console/README.md for the pages, the security model and the configuration (HINDSIGHT_CONSOLE__*).
"""
