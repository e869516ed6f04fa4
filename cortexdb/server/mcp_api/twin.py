"""A tool's REST twin: each MCP tool call is one or more calls of API routes, run through the
same per-request pipeline as HTTP requests (``pipeline.handle``: authentication, rate limit, the
gate's capability and membership checks, the engine's policy hook, the guard, the audit row,
the error envelope) with the caller's own credentials.  Nothing is decided here."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import attrs

from ...engine import jsoncodec
from .. import pipeline
from ..call import Handler, Route, ServerState
from ..dispatch import DirectRequest
from ..routes import BLUEPRINTS

#: the credentials a tool call carries to its twin (the rest of a request's headers stay behind)
FORWARDED = ("authorization", "x-cortex-actor", "origin")


def routes() -> dict[tuple[str, str], tuple[Route, Handler]]:
    """Every API route by ``(method, path)``: the ones the app installs (``routes.BLUEPRINTS``)."""
    return {(route.method, route.path): (route, handler) for blueprint in BLUEPRINTS
            for route, handler in blueprint.routes}  # fmt: skip


TWINS = routes()


@attrs.frozen
class Identity:
    """Who calls: the request headers that authenticate them (``Authorization``,
    ``X-Cortex-Actor``, ``Origin``), their user agent and address."""

    headers: dict[str, str]
    user_agent: str | None = None
    client: tuple[str, int] | None = None

    @classmethod
    def from_headers(cls, headers: Any, client: tuple[str, int] | None = None) -> Identity:
        kept = {name: headers.get(name) for name in FORWARDED if headers.get(name) is not None}
        return cls(kept, headers.get("user-agent"), client)

    @property
    def actor(self) -> str | None:
        return self.headers.get("x-cortex-actor")


class TwinError(Exception):
    """A twin answered with an error: its status and envelope (§6.6)."""

    def __init__(self, status: int, envelope: dict[str, Any]) -> None:
        super().__init__(envelope.get("message", ""))
        self.status = status
        self.envelope = envelope


class Caller:
    """One tool call's access to the API: ``await caller.call("POST", "/v1/recall", body=...)``."""

    def __init__(self, state: ServerState, identity: Identity, tool: str) -> None:
        self.state = state
        self.identity = identity
        self.tool = tool

    @property
    def actor(self) -> str | None:
        """The caller's actor as it named itself; the twin's authentication holds it to that."""
        return self.identity.actor

    async def call(self, method: str, path: str, *, body: Any = None,
                   query: dict[str, Any] | None = None) -> Any:  # fmt: skip
        """The twin's JSON answer; ``TwinError`` with its envelope when it answers >= 400."""
        route, handler = TWINS[(method, path)]
        raw = b"" if body is None else jsoncodec.encode(body)
        headers = dict(self.identity.headers)
        # the audit row's user agent says the call came through MCP, and which tool made it
        headers["user-agent"] = " ".join(filter(None, (f"cortexdb-mcp/{self.tool}", self.identity.user_agent)))
        if body is not None:
            headers["content-type"] = "application/json"
        scope = {
            "method": method, "path": path,
            "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()],
            "query_string": urlencode({k: _param(v) for k, v in (query or {}).items() if v is not None}).encode(),
            "client": self.identity.client,
        }  # fmt: skip
        response = await pipeline.direct(self.state, route, handler, {}, DirectRequest(scope, raw))
        data = await response.get_data()
        answer = jsoncodec.decode(data) if data else None
        if response.status_code >= 400:
            raise TwinError(response.status_code, answer if isinstance(answer, dict) else {})
        return answer


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
