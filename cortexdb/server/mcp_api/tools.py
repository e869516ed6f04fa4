"""The MCP tools: a registry of ``Tool``s, each a thin translation onto its REST twins.

A tool names the API routes it calls (``twins``): it can do nothing its caller could not do
with those routes, and the isolation tests run every tool against the same roles as its twins.
Schemas are derived from ``cortexdb/schemas`` (``schema.derive``/``schema.part``).  Adding a
tool is one decorated function::

    @tool("memory_x", twins=(("POST", "/v1/x"),), description="...",
          input_schema=derive("x_request", pick=(...)))
    async def memory_x(caller: Caller, args: dict) -> Outcome:
        answer = await caller.call("POST", "/v1/x", body=args)
        return Outcome(answer["text"], answer)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ...engine.stages import WAIT_MODES
from ...engine.temporal import format_ts
from ..params import VIEWS
from .schema import derive, part
from .twin import Caller


@attrs.frozen
class Outcome:
    """A tool's answer: text for the model, and the structured result."""

    text: str
    data: dict[str, Any]


@attrs.frozen
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    twins: tuple[tuple[str, str], ...]  # the API routes it calls, as (method, path)
    run: Callable[[Caller, dict[str, Any]], Awaitable[Outcome]]
    read_only: bool = False  # hints for the host (MCP tool annotations)
    destructive: bool = False


TOOLS: dict[str, Tool] = {}


def tool(name: str, *, description: str, twins: tuple[tuple[str, str], ...], input_schema: dict[str, Any],
         output_schema: dict[str, Any] | None = None, read_only: bool = False, destructive: bool = False):  # fmt: skip
    def register(run: Callable[[Caller, dict[str, Any]], Awaitable[Outcome]]):
        TOOLS[name] = Tool(name, " ".join(description.split()), input_schema, output_schema, twins, run,
                           read_only, destructive)  # fmt: skip
        return run

    return register


# -- memory_search: POST /v1/recall ---------------------------------------------------------------
SEARCH_FIELDS = ("scope", "query", "view", "traversal", "include", "temporal", "filters", "budgets",
                 "exclude_content", "citation_mode")  # fmt: skip


@tool("memory_search", twins=(("POST", "/v1/recall"),), read_only=True,
      input_schema=derive("recall_request", pick=SEARCH_FIELDS, required=("scope", "query")),
      output_schema=derive("stratified_pack", pick=("pack_id", "scope", "view", "context_block"), extra={
          "citations": part("stratified_pack", "/properties/provenance/properties/markers"),
          "sources": part("stratified_pack", "/properties/provenance/properties/citations")}),
      description="""
Recall what memory holds about a question, in a scope (e.g. org:acme/user:alice): a context block
of beliefs, facts and episodes with citation markers ([1], [2]...), the records each marker cites,
and the events each record rests on.  view=holistic (default) also reads the scope's ancestors.""")  # fmt: skip
async def memory_search(caller: Caller, args: dict[str, Any]) -> Outcome:
    pack = await caller.call("POST", "/v1/recall", body={**args, "diagnostics": "none"})
    provenance = pack["provenance"]
    data = {"pack_id": pack["pack_id"], "scope": pack["scope"], "view": pack["view"],
            "context_block": pack.get("context_block", ""), "citations": provenance.get("markers", []),
            "sources": provenance["citations"]}  # fmt: skip
    text = data["context_block"] or "Nothing in memory matches."
    if data["citations"]:
        text += "\n\nCitations:\n" + "\n".join(f"{c['marker']} {c['layer']} {c['id']}" for c in data["citations"])
    return Outcome(text, data)


# -- memory_ingest: POST /v1/experience -----------------------------------------------------------
WAITS = [mode.value for mode in WAIT_MODES if mode is not None]
INGEST_FIELDS = ("scope", "content", "modality", "context", "observed_actor", "subject", "directives",
                 "idempotency_key")  # fmt: skip


@tool("memory_ingest", twins=(("POST", "/v1/experience"),),
      input_schema=derive("experience_envelope", pick=INGEST_FIELDS, required=("scope", "content"), extra={
          "wait": {"enum": WAITS, "description": "answer once the write reached this stage (default: once it "
                                                 "is in the log); indexed: searchable; consolidated: beliefs updated"}}),
      output_schema=part("experience_result"),
      description="""
Write an experience to memory: a message, text, JSON or a triple, in a scope.  modality defaults
to conversation and context.observed_at to now.  Facts, beliefs and episodes are derived from it
asynchronously; wait=indexed answers once it is searchable.""")  # fmt: skip
async def memory_ingest(caller: Caller, args: dict[str, Any]) -> Outcome:
    body = {key: value for key, value in args.items() if key != "wait"}
    body.setdefault("modality", "conversation")
    body.setdefault("context", {"observed_at": format_ts(caller.state.engine.clock.now())})
    result = await caller.call("POST", "/v1/experience", body=body, query={"wait": args.get("wait")})
    return Outcome(f"Stored {result['event_id']} ({result['status']}).", result)


# -- memory_about_user: GET /v1/facts?subject= and GET /v1/beliefs?about= the caller ---------------
@tool("memory_about_user", twins=(("GET", "/v1/facts"), ("GET", "/v1/beliefs")), read_only=True,
      input_schema={"type": "object", "required": ["scope"], "additionalProperties": False, "properties": {
          "scope": part("common", "/$defs/scope_path"),
          "view": {"enum": list(VIEWS), "description": "local: this scope only; holistic (default): and its ancestors; "
                                                       "descend: and the scopes below it"},
          "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "per layer (default 20)"},
          "min_confidence": part("common", "/$defs/confidence")}},
      output_schema={"type": "object", "required": ["actor", "scope", "facts", "beliefs"], "properties": {
          "actor": part("common", "/$defs/actor_id"), "scope": part("common", "/$defs/scope_path"),
          "facts": {"type": "array", "items": part("fact")}, "beliefs": {"type": "array", "items": part("belief")}}},
      description="""
What memory holds about you, the caller: the current facts and beliefs whose subject (or object)
is your own actor id, in a scope and (view=holistic, the default) its ancestors.""")  # fmt: skip
async def memory_about_user(caller: Caller, args: dict[str, Any]) -> Outcome:
    actor = caller.actor
    query = {"scope": args["scope"], "view": args.get("view", "holistic"), "limit": args.get("limit", 20),
             "min_confidence": args.get("min_confidence")}  # fmt: skip
    facts = await caller.call("GET", "/v1/facts", query={**query, "subject": actor})
    beliefs = await caller.call("GET", "/v1/beliefs", query={**query, "about": actor})
    data = {"actor": actor, "scope": args["scope"], "facts": facts["items"], "beliefs": beliefs["items"]}
    lines = [f"- {_claim(f)} (fact, confidence {f['confidence']:.2f}) [{f['id']}]" for f in data["facts"]]
    lines += [f"- {_claim(b['claim'])} (belief: {b['stance']}, confidence {b['confidence']:.2f}) [{b['id']}]"
              for b in data["beliefs"]]  # fmt: skip
    return Outcome("\n".join(lines) or f"Memory holds no facts or beliefs about {actor} here.", data)


def _claim(record: dict[str, Any]) -> str:
    def name(node: dict[str, Any]) -> str:
        return str(node.get("name") or node.get("value") or node.get("id"))

    return f"{name(record['subject'])} {record['predicate']} {name(record['object'])}"


# -- memory_forget: POST /v1/forget ---------------------------------------------------------------
@tool("memory_forget", twins=(("POST", "/v1/forget"),), input_schema=derive("forget_request"), destructive=True,
      description="""
Forget records of a scope: the derived layers (episodes, facts, beliefs, understanding) chosen
by a selector (about_subject, predicate, memory_ids, time windows); cascade redact_events also
blanks the events' text.  An empty selector needs confirm_all: true.  Needs the capability
forget.cascade.<mode> and the right to write the scope; audited.""")  # fmt: skip
async def memory_forget(caller: Caller, args: dict[str, Any]) -> Outcome:
    result = await caller.call("POST", "/v1/forget", body=args)
    counts = ", ".join(f"{layer} {n}" for layer, n in result["deleted"].items() if n) or "nothing"
    return Outcome(f"Forgot {counts} (audit {result['audit_id']}).", result)


# -- memory_answer: POST /v1/answer ---------------------------------------------------------------
ANSWER_FIELDS = ("scope", "view", "traversal", "include", "temporal", "filters", "budgets", "citation_mode")


@tool("memory_answer", twins=(("POST", "/v1/answer"),), read_only=True,
      input_schema=derive("recall_request", pick=ANSWER_FIELDS, required=("scope", "question"), extra={
          "question": {"type": "string", "minLength": 1, "description": "what to answer from memory"},
          "answer_model": {"type": "string", "description": "a model this deployment serves (default: its own)"},
          "use_pack_id": {"type": "string", "description": "answer from a pack memory_search returned "
                                                           "in the last 60 s instead of recalling again"}}),
      output_schema=derive("answer_response", pick=("pack_id", "answer", "supported", "citations")),
      description="""
Answer a question from memory: recall in a scope, then compose an answer whose every sentence
cites its records ([1], [2]...).  supported=false says memory held nothing that answers it.
Needs the capability llm.invoke; the answer model is the deployment's (offline: extractive).""")  # fmt: skip
async def memory_answer(caller: Caller, args: dict[str, Any]) -> Outcome:
    result = await caller.call("POST", "/v1/answer", body={**args, "stream": False, "diagnostics": "none"})
    data = {key: result.get(key) for key in ("pack_id", "answer", "supported", "citations")}
    return Outcome(result.get("answer") or "Memory holds nothing that answers this.", data)
