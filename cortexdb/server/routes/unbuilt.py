"""Surfaces of the reference this server does not implement yet: a truthful 501 each, labelled
with its family's stability tier (§2.4).  They are a fallback: ``create_app`` installs them last
and skips any that another family declares, so building one is only declaring it there."""

from __future__ import annotations

from typing import Any

from ...errors import NotImplementedYet
from ..call import Blueprint, Call

api = Blueprint()

#: (method, path, tier) of each surface not built yet: none today (understanding's synthesize and
#: the vocabularies were the last); the mechanism stays for the next one the reference adds
UNBUILT: tuple[tuple[str, str, str], ...] = ()


def unbuilt_route(method: str, path: str, tier: str) -> None:
    async def unbuilt(call: Call, **_: Any):
        raise NotImplementedYet(f"{method} {path} is part of the reference but not implemented by this server yet",
                                details={"endpoint": f"{method} {path}"})  # fmt: skip

    unbuilt.__name__ = f"unbuilt_{method.lower()}_" + path.strip("/").replace("/", "_").replace("{", "").replace("}", "")
    unbuilt.fallback = True  # type: ignore[attr-defined]  # a declared route of the same name wins
    body = {"type": "object", "description": "not specified until the route is built"} if method in ("POST", "PUT") else None
    api(method, path, tier=tier, summary="Not implemented yet (501)", access="tenant", body=body,
        status=501)(unbuilt)  # fmt: skip


for _method, _path, _tier in UNBUILT:
    unbuilt_route(_method, _path, _tier)
