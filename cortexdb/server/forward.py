"""Several nodes on one store: a request for a scope another node owns is forwarded to it.

When the engine refuses a request with ``SCOPE_OWNED_ELSEWHERE`` (engine/storage/placement.py),
``relay`` sends the same request — method, path, query, headers (the caller's credentials
included) and body — to the owner's advertised address and answers with the owner's response,
marked ``X-Cortex-Forwarded-To: <node>``.  The owner runs the whole pipeline again (its own
authentication, policy checks and audit row), so a forwarded read is checked exactly as a direct
one.  A request is forwarded once at most (``X-Cortex-Forwarded-By``): an owner that no longer
holds the partition answers the 503 itself, and so does a node whose owner has no address yet.
Upload routes (a streamed body) are not forwarded.  docs/scale-out.md; docs/decisions.md says why
forwarding rather than a redirect.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from quart import Response

from ..errors import CortexError, ScopeOwnedElsewhere

log = logging.getLogger("cortexdb.server")

FORWARDED_BY = "X-Cortex-Forwarded-By"
FORWARDED_TO = "X-Cortex-Forwarded-To"
FORWARD_TIMEOUT = 120.0  # seconds: a forwarded wait=consolidated may take as long as a direct one
_HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive", "upgrade",
               "te", "trailer", "proxy-authorization", "proxy-connection"}  # fmt: skip
_KEEP = ("content-type", "retry-after", "location")  # besides X-Cortex-* and X-RateLimit-*


async def relay(state: Any, route: Any, req: Any, raw: bytes, exc: CortexError) -> Response | None:
    """The owner's answer to this request, or None when it cannot be forwarded."""
    placement = getattr(state.engine, "placement", None)
    if (placement is None or not isinstance(exc, ScopeOwnedElsewhere) or route.upload
            or req.headers.get(FORWARDED_BY) or not exc.details.get("owner")):  # fmt: skip
        return None
    owner = exc.details["owner"]
    address = await placement.address_of(owner)
    if address is None:
        return None
    headers = [(name, value) for name, value in req.headers.items() if name.lower() not in _HOP_BY_HOP]
    headers.append((FORWARDED_BY, placement.node))
    query = list(req.args.items(multi=True))
    try:
        async with httpx.AsyncClient(base_url=address, timeout=FORWARD_TIMEOUT) as client:
            answer = await client.request(req.method, req.path, params=query, headers=headers, content=raw)
    except httpx.HTTPError as error:  # the owner is unreachable: the caller retries (503)
        log.warning("could not forward %s %s to node %s at %s: %r", req.method, req.path, owner, address, error)
        return None
    response = Response(answer.content, status=answer.status_code)
    for name, value in answer.headers.items():
        low = name.lower()
        if low in _KEEP or low.startswith(("x-cortex-", "x-ratelimit-")):
            response.headers[name] = value
    response.headers[FORWARDED_TO] = owner
    return response
