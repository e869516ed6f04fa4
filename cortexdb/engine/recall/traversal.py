"""THE one traversal: the scopes a read of a scope covers (docs/decisions.md, "One traversal").

Recall and every layer read (``Engine.traverse``, the server's multi-scope pages) resolve their
scopes here, so both see the same scopes and the same denied placeholders.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidQuery, PolicyDenied
from ..actors.messages import CountRecords
from ..policy.capabilities import SCOPE_READ_LOCAL
from ..policy.hook import Verdict
from ..results import Traversal
from ..scopes import ancestors, canonical_scope, is_within

VIEWS = ("local", "holistic", "descend")


async def traverse(ctx: Any, scope: str, view: str, caller: str) -> Traversal:
    """The scopes a ``view`` of ``scope`` covers for ``caller``.

    ``local``: the scope.  ``holistic``: the scope, then its ancestors that hold records,
    nearest first — only up to the roots named by the scope's ``inherit_from`` when it
    registered some.  ``descend``: the scope, then every scope below it that holds records.
    Scopes beyond the start that the caller may not read are skipped and reported as
    placeholders; the start scope itself is the caller's to check (it fails the request)."""
    scope = canonical_scope(scope)
    if view not in VIEWS:
        raise InvalidQuery(f"view must be one of {list(VIEWS)}", details={"field": "view"})
    if view == "local":
        return Traversal(view, (scope,))
    reach = await _reach(ctx, scope, view)
    scopes, denied = [scope], []
    for path in reach:
        answer = verdict(ctx.policy, caller, SCOPE_READ_LOCAL, path)
        if answer.allowed:
            scopes.append(path)
            continue
        count = await ctx.supervisor.request(path, lambda reply: CountRecords(reply=reply))
        denied.append({"scope": path, "denied": True, "item_count": count,
                       "denied_reason": answer.tier or "policy"})  # fmt: skip
    return Traversal(view, tuple(scopes), tuple(denied))


async def _reach(ctx: Any, scope: str, view: str) -> list[str]:
    """The scopes beyond the start a view reaches, before the caller's rights are asked."""
    scopes = ctx.tables.scopes
    if view == "descend":
        return [path async for path in scopes.ids(starting_with=scope + "/")]
    reach = ancestors(scope)
    record = await scopes.get(scope)
    inherit = (record.policies.get("inherit_from") if record else None) or None
    if inherit:
        reach = [a for a in reach if any(is_within(a, root) for root in inherit)]
    return [a for a in reach if await scopes.get(a) is not None]


def verdict(hook: Any, caller: str, capability: str, scope: str) -> Verdict:
    """The hook's non-raising answer; a hook that only implements ``check`` still works."""
    if hasattr(hook, "verdict"):
        return hook.verdict(caller, capability, scope)
    try:
        hook.check(caller, capability, scope)
    except PolicyDenied as exc:
        return Verdict(False, exc.details.get("denied_by_tier"), exc.message)
    return Verdict(True)
