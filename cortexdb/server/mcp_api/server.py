"""The MCP server (the ``mcp`` package's low-level ``Server``): ``tools/list`` from the registry,
``tools/call`` through the tool's REST twins as the caller.

A failure a caller can act on — bad arguments, a denied capability, a scope they may not read, an
expired token — is a tool result with ``isError`` and the API's error envelope (§6.6), so the
model sees it; only an unknown tool is a protocol error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from ... import __version__
from ...errors import CortexError, InvalidBody
from ..call import ServerState
from .tools import TOOLS, Tool
from .twin import Caller, Identity, TwinError

INSTRUCTIONS = """CortexDB is this agent's long-term memory.  memory_search before answering
questions that may depend on what was said or learnt before; memory_ingest what is worth
remembering; memory_about_user for what is known about the user.  Scopes are paths such as
org:acme/user:alice."""

IdentityOf = Callable[[Any], Identity]  # the request context -> who calls


def build_server(state: ServerState, identity: IdentityOf) -> Server:
    """An MCP server over ``state``; ``identity(ctx)`` says who makes each request (HTTP: the
    request's headers; stdio: the configured actor)."""
    validators = {name: Draft202012Validator(t.input_schema) for name, t in TOOLS.items()}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[listing(t) for t in TOOLS.values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        found = TOOLS.get(params.name)
        if found is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name!r}; see tools/list")
        args = params.arguments or {}
        try:
            check(validators[found.name], found.name, args)
            outcome = await found.run(Caller(state, identity(ctx), found.name), args)
        except TwinError as failed:
            return error_result(failed.envelope)
        except CortexError as error:
            return error_result(error.to_envelope(state.engine.new_id("req")))
        return types.CallToolResult(content=[types.TextContent(type="text", text=outcome.text)],
                                    structured_content=outcome.data)  # fmt: skip

    return Server("cortexdb", version=__version__, title="CortexDB memory", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool,
                  get_tool_input_schema=lambda name: TOOLS[name].input_schema if name in TOOLS else None)  # fmt: skip


def listing(found: Tool) -> types.Tool:
    hints = types.ToolAnnotations(read_only_hint=found.read_only, destructive_hint=found.destructive,
                                  open_world_hint=False)  # fmt: skip
    return types.Tool(name=found.name, description=found.description, input_schema=found.input_schema,
                      output_schema=found.output_schema, annotations=hints)  # fmt: skip


def check(validator: Draft202012Validator, name: str, args: dict[str, Any]) -> None:
    """The arguments against the tool's input schema: 400 ``INVALID_BODY`` naming the field."""
    error = next(iter(sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))), None)
    if error is not None:
        field = ".".join(str(part) for part in error.absolute_path) or "$"
        raise InvalidBody(f"{name}: {field}: {error.message[:300]}", details={"field": field, "tool": name})


def error_result(envelope: dict[str, Any]) -> types.CallToolResult:
    """A refusal the model can read: the error code and message, then the whole envelope."""
    text = f"{envelope.get('error_code', 'ERROR')}: {envelope.get('message', '')}\n{json.dumps(envelope)}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=envelope, is_error=True)  # fmt: skip
