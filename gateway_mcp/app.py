"""The MCP server: lists the enabled tools and runs a call as validate -> gRPC -> result, with every
failure returned as a tool error (isError) the model can read. The gRPC channel lives in the server's
lifespan: one channel for every session and request."""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from gateway_mcp.auth import CallerOf
from gateway_mcp.calls import CALLS
from gateway_mcp.channel import MemoryClients
from gateway_mcp.config import GatewaySettings
from gateway_mcp.errors import describe
from gateway_mcp.prompt import INSTRUCTIONS, PROMPT_BY_LANGUAGE, PROMPT_NAME
from gateway_mcp.tools import DEBUG_TOOL, TOOLS, ToolSpec

__all__ = ["GatewayState", "build_server", "enabled_tools"]

SERVER_NAME = "hindsight"


@dataclass(frozen=True, slots=True)
class GatewayState:
    clients: MemoryClients


def _version() -> str:
    try:
        return importlib.metadata.version("hindsight-memory-server")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return ""


def enabled_tools(settings: GatewaySettings) -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in TOOLS if spec.name != DEBUG_TOOL or settings.debug_tool}


def build_server(settings: GatewaySettings, caller_of: CallerOf) -> Server[GatewayState]:
    tools = enabled_tools(settings)
    definitions = {name: spec.definition() for name, spec in tools.items()}

    @asynccontextmanager
    async def lifespan(_: Server[GatewayState]) -> AsyncIterator[GatewayState]:
        clients = MemoryClients(
            settings.targets, settings.deadline_s, settings.api_keys, settings.targets_client_tls
        )
        try:
            yield GatewayState(clients)
        finally:
            await clients.close()

    async def list_tools(
        ctx: ServerRequestContext[GatewayState], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(definitions.values()))

    async def call_tool(
        ctx: ServerRequestContext[GatewayState], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = tools.get(params.name)
        if spec is None:
            # Not a tool error: the spec answers a call to an unknown tool with a protocol error.
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"unknown tool {params.name!r}; this server has {', '.join(tools)}",
            )
        try:
            arguments = spec.arguments.model_validate(params.arguments or {})
            caller = caller_of()
            client = ctx.lifespan_context.clients.for_tenant(caller.tenant)
            text, result = await CALLS[spec.name](client, caller, arguments)
        except Exception as error:  # every failure becomes a tool error, never a traceback
            return types.CallToolResult(
                content=[types.TextContent(text=describe(error, spec.name))], is_error=True
            )
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=result.model_dump(mode="json")
        )

    async def list_prompts(
        ctx: ServerRequestContext[GatewayState], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[PROMPT])

    async def get_prompt(
        ctx: ServerRequestContext[GatewayState], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name != PROMPT_NAME:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"unknown prompt {params.name!r}; this server has {PROMPT_NAME}",
            )
        language = (params.arguments or {}).get("language", "")
        if language not in PROMPT_BY_LANGUAGE:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"language: {language!r} is not en, zh or empty"
            )
        return types.GetPromptResult(
            description=PROMPT.description,
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(text=PROMPT_BY_LANGUAGE[language]))
            ],
        )

    def tool_input_schema(name: str) -> dict[str, object] | None:
        definition = definitions.get(name)
        return None if definition is None else definition.input_schema

    return Server[GatewayState](
        SERVER_NAME,
        version=_version(),
        title="hindsight memory",
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        get_tool_input_schema=tool_input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


PROMPT = types.Prompt(
    name=PROMPT_NAME,
    title="When to use hindsight's memory tools",
    description="The system prompt that tells a model when to write, recall and summarize memory.",
    arguments=[
        types.PromptArgument(name="language", description="en, zh, or empty for both", required=False)
    ],
)
