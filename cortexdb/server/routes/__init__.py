"""The HTTP endpoints (reference §8), one module per endpoint family: thin translations onto the
engine, the registry, the policy engine and the audit log.  Every capability check goes through
``call.check`` so it is attributed (403 body, ``X-Cortex-Policy``) and audited.

Each module declares its routes in a ``Blueprint``; ``BLUEPRINTS`` is the order ``create_app``
installs them in (the order of ``GET /v1/openapi.json``).
"""

from __future__ import annotations

from . import (
    admin,
    answer,
    audit,
    auth,
    blobs,
    erasures,
    experience,
    feeds,
    forget,
    intake,
    layers,
    lifecycle,
    phrases,
    policy,
    proposals,
    recall,
    relationships,
    scopes,
    signals,
    transfer,
    unbuilt,
    understanding,
    vocabularies,
)

BLUEPRINTS = (experience.api, recall.api, answer.api, forget.api, layers.api, understanding.api, vocabularies.api,
              phrases.api,
              scopes.api, lifecycle.api, erasures.api, auth.api, policy.api, audit.api, admin.api, blobs.api,
              transfer.api, feeds.api, relationships.api, signals.api, proposals.api, intake.api,
              admin.openapi_api, unbuilt.api)  # fmt: skip  (unbuilt last: the fallback)


def declared() -> list:
    """Every route ``create_app`` installs, in its order (an unbuilt surface's 501 only where no
    family declares it): what the OpenAPI document describes (``docs/api.md`` is made from it)."""
    out = []
    for blueprint in BLUEPRINTS:
        for route, handler in blueprint.routes:
            if getattr(handler, "fallback", False) and any((r.method, r.path) == (route.method, route.path) for r in out):
                continue
            out.append(route)
        out.extend(route for route, _ in blueprint.websockets)
    return out
