"""The policy hook the engine calls once per decision.

``check`` returns quietly when ``caller`` may use ``capability`` on ``scope`` and raises
``PolicyDenied`` (with ``details.capability`` and ``details.denied_by_tier``) otherwise.  The
embedding default allows everything: an embedding application is its own operator.  The HTTP
server plugs in the four-tier evaluator.
"""

from __future__ import annotations

from typing import Protocol


class PolicyHook(Protocol):
    def check(self, caller: str, capability: str, scope: str) -> None: ...


class AllowAll:
    def check(self, caller: str, capability: str, scope: str) -> None:
        return None
