"""Surfaces of the reference this server does not implement yet: a truthful 501 each."""

from __future__ import annotations

from typing import Any

from ...errors import NotImplementedYet
from ..call import Blueprint, Call

api = Blueprint()

UNBUILT = (("POST", "/v1/understanding/synthesize", "experimental"),
           ("POST", "/v1/vocabularies", "beta"))  # fmt: skip


def unbuilt_route(method: str, path: str, tier: str) -> None:
    async def unbuilt(call: Call, **_: Any):
        raise NotImplementedYet(f"{method} {path} is part of the reference but not implemented by this server yet",
                                details={"endpoint": f"{method} {path}"})  # fmt: skip

    unbuilt.__name__ = "unbuilt_" + path.strip("/").replace("/", "_").replace("{", "").replace("}", "")
    api(method, path, tier=tier, summary="Not implemented yet (501)", access="tenant")(unbuilt)


for _method, _path, _tier in UNBUILT:
    unbuilt_route(_method, _path, _tier)
