"""The capability catalog (reference Appendix A): the only place capability names are spelled.

Every module that checks, grants or lists a capability names it by one of these constants (or the
helpers for the families: ``scope_create(type)``, ``scope_read(view)``,
``policy_administer(tier)``).  ``CAPABILITIES`` is the catalog in its published order (the order
``GET /v1/policy/effective`` and ``whoami`` list them in).  Policy documents and token ``caps``
name capabilities as data; ``cortexdb token mint`` refuses names outside the catalog.
"""

from __future__ import annotations

#: the scope types every deployment knows (``scope.create.<type>`` exists for each, §18.2 item 19)
BUILTIN_SCOPE_TYPES = ("org", "user", "agent", "service", "ws", "project", "team", "dept",
                       "global", "system")  # fmt: skip

SCOPE_CREATE_PREFIX = "scope.create."
SCOPE_CREATE_CROSS_TENANT = "scope.create.cross_tenant"
SCOPE_CREATE_CUSTOM = "scope.create.custom"
SCOPE_WRITE = "scope.write"
SCOPE_WRITE_ELEVATED = "scope.write.elevated"
SCOPE_WRITE_ON_BEHALF_OF = "scope.write.on_behalf_of"
SCOPE_WRITE_ABOUT_OTHER = "scope.write.about_other"
SCOPE_READ_LOCAL = "scope.read.local"
SCOPE_READ_HOLISTIC = "scope.read.holistic"
SCOPE_READ_DESCEND = "scope.read.descend"
SCOPE_READ_CROSS_TENANT = "scope.read.cross_tenant"
UNDERSTANDING_READ = "understanding.read"
UNDERSTANDING_READ_CROSS_SCOPE = "understanding.read.cross_scope"
UNDERSTANDING_SYNTHESIZE = "understanding.synthesize"
FORGET_CASCADE_DERIVED_ONLY = "forget.cascade.derived_only"
FORGET_CASCADE_REDACT_EVENTS = "forget.cascade.redact_events"
FORGET_GDPR = "forget.gdpr"
FORGET_GDPR_CROSS_WORKSPACE = "forget.gdpr.cross_workspace"
IMPORT_FROM_PREFIX = "import.from."
IMPORT_FROM_MEM0 = "import.from.mem0"
IMPORT_FROM_ZEP = "import.from.zep"
IMPORT_FROM_LETTA = "import.from.letta"
IMPORT_FROM_OPENAI = "import.from.openai"
IMPORT_FROM_JSONL = "import.from.jsonl"
IMPORT_FROM_MCP = "import.from.mcp"  # the MCP memory server's memory.jsonl (not in Appendix A)
EXPORT_FORMAT_PREFIX = "export.format."
EXPORT_FORMAT_MEM0 = "export.format.mem0"
EXPORT_FORMAT_ZEP = "export.format.zep"
EXPORT_FORMAT_JSONL = "export.format.jsonl"
EXPORT_FORMAT_LETTA = "export.format.letta"  # §8.12 lists letta as an export format
LIFECYCLE_SUBSCRIBE = "lifecycle.subscribe"
LLM_INVOKE = "llm.invoke"
DIAGNOSTICS_READ = "diagnostics.read"
AUDIT_READ = "audit.read"
AUDIT_READ_CROSS_ACTOR = "audit.read.cross_actor"
AUTH_REVOKE = "auth.revoke"
TEMPORAL_PHRASES_READ = "temporal.phrases.read"
TEMPORAL_PHRASES_WRITE = "temporal.phrases.write"
VOCABULARY_READ = "vocabulary.read"
VOCABULARY_WRITE = "vocabulary.write"
POLICY_ADMINISTER_DEPLOYMENT = "policy.administer.deployment"
POLICY_ADMINISTER_TENANT = "policy.administer.tenant"
POLICY_ADMINISTER_SCOPE = "policy.administer.scope"
POLICY_ADMINISTER_ACTOR = "policy.administer.actor"
BLOB_UPLOAD = "blob.upload"
BLOB_READ = "blob.read"
SIGNAL_WRITE = "signal.write"  # record a signal; tenant signal type settings (with tenant admin)
SIGNAL_READ = "signal.read"  # signal snapshots, and signals in recall packs
PROPOSAL_CREATE = "proposal.create"  # propose a memory write for review (Cognitive Core)
PROPOSAL_READ = "proposal.read"
PROPOSAL_REVIEW = "proposal.review"  # approve or reject a proposal (with the scope's ownership)
INTAKE_READ = "intake.read"  # the pending intake results of the caller's writes
INTAKE_ACK = "intake.ack"
ADMIN_FLUSH = "admin.flush"
ADMIN_COMPACT = "admin.compact"
ADMIN_HEALTH = "admin.health"


def scope_create(scope_type: str) -> str:
    """``scope.create.<type>``: registering a scope of that type."""
    return SCOPE_CREATE_PREFIX + scope_type


def scope_read(view: str) -> str:
    """``scope.read.<view>`` for a traversal view (``local``, ``holistic``, ``descend``)."""
    return {"local": SCOPE_READ_LOCAL, "holistic": SCOPE_READ_HOLISTIC,
            "descend": SCOPE_READ_DESCEND}[view]  # fmt: skip


def policy_administer(tier: str) -> str:
    """``policy.administer.<tier>`` for a policy tier (deployment, tenant, scope, actor)."""
    return {"deployment": POLICY_ADMINISTER_DEPLOYMENT, "tenant": POLICY_ADMINISTER_TENANT,
            "scope": POLICY_ADMINISTER_SCOPE, "actor": POLICY_ADMINISTER_ACTOR}[tier]  # fmt: skip


# Appendix A, plus scope.create.<type> for the rest of the builtin scope types (§18.2 item 19).
CAPABILITIES: tuple[str, ...] = (
    *(scope_create(t) for t in BUILTIN_SCOPE_TYPES),
    SCOPE_CREATE_CROSS_TENANT, SCOPE_CREATE_CUSTOM,
    SCOPE_WRITE, SCOPE_WRITE_ELEVATED, SCOPE_WRITE_ON_BEHALF_OF, SCOPE_WRITE_ABOUT_OTHER,
    SCOPE_READ_LOCAL, SCOPE_READ_HOLISTIC, SCOPE_READ_DESCEND, SCOPE_READ_CROSS_TENANT,
    UNDERSTANDING_READ, UNDERSTANDING_READ_CROSS_SCOPE, UNDERSTANDING_SYNTHESIZE,
    FORGET_CASCADE_DERIVED_ONLY, FORGET_CASCADE_REDACT_EVENTS, FORGET_GDPR,
    FORGET_GDPR_CROSS_WORKSPACE,
    IMPORT_FROM_MEM0, IMPORT_FROM_ZEP, IMPORT_FROM_LETTA, IMPORT_FROM_OPENAI,
    IMPORT_FROM_JSONL, IMPORT_FROM_MCP, EXPORT_FORMAT_MEM0, EXPORT_FORMAT_ZEP, EXPORT_FORMAT_JSONL,
    EXPORT_FORMAT_LETTA,
    LIFECYCLE_SUBSCRIBE, LLM_INVOKE, DIAGNOSTICS_READ, AUDIT_READ,
    AUDIT_READ_CROSS_ACTOR, AUTH_REVOKE, TEMPORAL_PHRASES_READ, TEMPORAL_PHRASES_WRITE,
    VOCABULARY_READ, VOCABULARY_WRITE, POLICY_ADMINISTER_DEPLOYMENT,
    POLICY_ADMINISTER_TENANT, POLICY_ADMINISTER_SCOPE, POLICY_ADMINISTER_ACTOR,
    BLOB_UPLOAD, BLOB_READ, ADMIN_FLUSH, ADMIN_COMPACT, ADMIN_HEALTH,
    SIGNAL_WRITE, SIGNAL_READ, PROPOSAL_CREATE, PROPOSAL_READ, PROPOSAL_REVIEW, INTAKE_READ, INTAKE_ACK,
)  # fmt: skip
