"""The Python SDK of CortexDB's HTTP API (docs/sdk.md)::

    from cortexdb.client import Memory
    memory = Memory()                     # CORTEX_URL or http://127.0.0.1:8077
    memory.add("Alice likes green tea")
    print(memory.search("what does Alice drink?"))

``CortexClient`` (``Memory``) blocks; ``AsyncCortexClient`` (``AsyncMemory``) is awaited, under
Trio or asyncio.  Both cover every public endpoint — writes, recall (and its stream), the layer
reads with cursor-following iterators, ``beliefs.why``, forget, GDPR erasure, blobs, the
lifecycle feed with resume, scopes, policy, audit, tokens, temporal phrases, vocabularies, the
understanding synthesize job, admin, import and export jobs — and return typed records (``_records.Record``: attributes, unknown fields kept).
Errors are the server's ``cortexdb.errors`` classes with ``error_code``, ``retriable`` and
``request_id``; retriable failures are retried with exponential back-off and jitter, honouring
``Retry-After``.

Importing this package loads neither the engine nor the server (tests/test_sdk_import.py).
"""

from __future__ import annotations

from ..errors import ConnectionFailed, CortexError
from ._admin_models import (
    AuditRow,
    AuditVerification,
    Blob,
    CapabilitySet,
    Erasure,
    ErasureCancel,
    ErasurePreview,
    ForgetResult,
    Phrase,
    Scope,
    Whoami,
)
from ._clients import AsyncCortexClient, AsyncMemory, CortexClient, Memory
from ._errors import error_from_envelope
from ._models import (
    Answer,
    Belief,
    BulkReceipt,
    Cancelled,
    Concept,
    Episode,
    Event,
    ExperienceReceipt,
    Fact,
    Layers,
    LifecycleEvent,
    MemoryEvent,
    Pack,
    StreamChunk,
    Timeline,
    Why,
)
from ._records import Page, Record
from ._settings import DEFAULT_URL, RetryPolicy
from ._transfer import ExportJob, ImportJob
from ._transport import Call
from ._understanding import SynthesisJob, Vocabulary

__all__ = [
    "DEFAULT_URL", "Answer", "AsyncCortexClient", "AsyncMemory", "AuditRow", "AuditVerification", "Belief", "Blob",
    "BulkReceipt", "Call", "Cancelled", "CapabilitySet", "Concept", "ConnectionFailed", "CortexClient",
    "CortexError", "Episode", "Erasure", "ErasureCancel", "ErasurePreview", "Event", "ExperienceReceipt", "ExportJob",
    "Fact", "ForgetResult", "ImportJob", "Layers", "LifecycleEvent", "Memory", "MemoryEvent", "Pack", "Page",
    "Phrase", "Record", "RetryPolicy", "Scope", "StreamChunk", "SynthesisJob", "Timeline", "Vocabulary", "Whoami",
    "Why", "error_from_envelope",
]  # fmt: skip
