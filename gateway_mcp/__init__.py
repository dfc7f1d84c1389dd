"""hindsight's MCP gateway: the tools memory_write, memory_recall, memory_summarize (and, when enabled,
memory_debug) over stdio and streamable HTTP, each call one gRPC call on the memory servers.

It imports the contract and the shared client (`hindsight.client`) only, never the server's internals.
"""
