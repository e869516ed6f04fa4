"""The policy hook the engine calls once per decision.

``check`` returns quietly when ``caller`` may use ``capability`` on ``scope`` and raises
``PolicyDenied`` (with ``details.capability`` and ``details.denied_by_tier``) otherwise; the
server records it (audit row, ``X-Cortex-Policy``).  ``verdict`` answers the same question
without raising or recording: traversals use it to *skip* the scopes a caller may not read
(holistic and descend views) instead of failing the whole request.  The embedding default
allows everything: an embedding application is its own operator.  The HTTP server plugs in its
gate (the four-tier evaluator plus scope membership).
"""

from __future__ import annotations

from typing import Protocol

import attrs


@attrs.frozen
class Verdict:
    allowed: bool
    tier: str | None = None  # the tier that denied (deployment | tenant | scope | actor | token)
    reason: str = ""


ALLOWED = Verdict(True)


class PolicyHook(Protocol):
    def check(self, caller: str, capability: str, scope: str) -> None: ...

    def verdict(self, caller: str, capability: str, scope: str) -> Verdict: ...


class AllowAll:
    def check(self, caller: str, capability: str, scope: str) -> None:
        return None

    def verdict(self, caller: str, capability: str, scope: str) -> Verdict:
        return ALLOWED
