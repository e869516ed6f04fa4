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
    scopes,
    signals,
    transfer,
    unbuilt,
    understanding,
)

BLUEPRINTS = (experience.api, recall.api, answer.api, forget.api, layers.api, understanding.api, phrases.api,
              scopes.api, lifecycle.api, erasures.api, auth.api, policy.api, audit.api, admin.api, blobs.api,
              transfer.api, feeds.api, signals.api, proposals.api, intake.api,
              admin.openapi_api, unbuilt.api)  # fmt: skip  (unbuilt last: the fallback)
