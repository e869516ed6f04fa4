"""Answers (reference §8.4, §10.2) and narrative packs (§9.1 ``view=narrative``): recall composed
with an LLM, never a second recall.

1. ``validate``: the answer's own fields here; its recall fields are recall's (checked by
   ``request.validate`` when the recall runs);
2. the pack: the one recall (``RecallCoordinator``) with the question as its query — or, with
   ``use_pack_id``, a pack the same caller recalled in the last 60 s (its scope's read rights and
   ``llm.invoke`` checked again);
3. the passages: every pack item, numbered as the context block numbers them
   (``render.passages``);
4. the LLM (``answer_model``, routed by ``engine/llm``) writes, citing passages by marker; its
   pieces stream as ``token`` events with ``citation_mode`` applied (``citing``).  A pack with
   nothing in it is not sent to a model: the answer says the memory holds nothing;
5. the response: ``answer``, ``supported`` (whether it cites anything), ``citations``, the pack's
   ``provenance`` (plus an ``llm`` trail phase), ``diagnostics`` (``recall_ms``, ``llm_ms``, token
   counts) and ``as_of``.

An ``idempotency_key`` replays the first answer for 24 hours (``(caller, /v1/answer, key)``,
409 with another body); ``replayed: true`` marks a replay.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from ...errors import InvalidAnswer
from ..actors.services import Replay, body_hash
from ..llm import LLMRouter
from ..llm.extractive import NO_SUPPORT, NOTHING_TO_TELL
from ..llm.prompts import COUNTED_BY, count_tokens, pieces, prompt_tokens
from ..model.fields import ANY, unknown_field
from ..policy.capabilities import LLM_INVOKE, SCOPE_READ_LOCAL, scope_read
from ..retrieve import render
from ..scopes import canonical_scope
from ..spi.llm import ANSWER, NARRATIVE, Completion, Passage, Prompt, Usage
from . import citing
from .request import DIAGNOSTICS, LAYERS, MAX_QUERY_CHARS, REQUEST_FIELDS, REQUEST_SHAPE, RecallSpec

FAMILY = "/v1/answer"  # the idempotency family
OWN_FIELDS = {"question", "answer_model", "answer_max_tokens", "use_pack_id", "stream", "idempotency_key"}
RECALL_FIELDS = REQUEST_FIELDS - {"query", "stream", "idempotency_key", "format"}
SHAPE = {**dict.fromkeys(OWN_FIELDS, ANY), **{k: REQUEST_SHAPE[k] for k in RECALL_FIELDS}}  # every depth
VIEWS = ("holistic", "granular", "raw", "local", "descend")  # the packs an answer can read


@attrs.frozen
class AnswerSpec:
    question: str
    model: str | None
    max_tokens: int
    use_pack_id: str | None
    citation_mode: str
    diagnostics: str
    idempotency_key: str | None
    recall: dict[str, Any] | None  # the recall request; None when a pack is reused


@attrs.define
class Written:
    """What the LLM wrote, with ``citation_mode`` applied."""

    text: str
    found: list[tuple[Passage, float]]  # the passages it cites, with their support strength
    completion: Completion
    llm_ms: float


def validate(request: Any, config: Any) -> AnswerSpec:
    if not isinstance(request, dict):
        raise InvalidAnswer("$", "the answer request must be a JSON object")
    unknown = unknown_field(request, SHAPE)
    if unknown is not None:
        raise InvalidAnswer(unknown, "is not a field of the answer request")
    question = request.get("question")
    if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUERY_CHARS:
        raise InvalidAnswer("question", f"is required: a non-empty string of at most {MAX_QUERY_CHARS} characters")
    model = request.get("answer_model")
    if model is not None and (not isinstance(model, str) or not 0 < len(model) <= 200):
        raise InvalidAnswer("answer_model", "must be a model id (a string of 1 to 200 characters)")
    limit = config.answer_max_tokens_limit
    max_tokens = request.get("answer_max_tokens", config.answer_max_tokens)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= limit:
        raise InvalidAnswer("answer_max_tokens", f"must be an integer from 1 to {limit}")
    pack_id = request.get("use_pack_id")
    if pack_id is not None and (not isinstance(pack_id, str) or not pack_id.startswith("pack_")):
        raise InvalidAnswer("use_pack_id", "must be the pack_id of a recent recall or answer (pack_...)")
    mode = request.get("citation_mode") or citing.INLINE
    if mode not in render.CITATION_MODES:
        raise InvalidAnswer("citation_mode", f"must be one of {list(render.CITATION_MODES)}")
    diagnostics = request.get("diagnostics") or "summary"
    if diagnostics not in DIAGNOSTICS:
        raise InvalidAnswer("diagnostics", f"must be one of {list(DIAGNOSTICS)}")
    key = request.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 64):
        raise InvalidAnswer("idempotency_key", "must be a string of 1 to 64 characters")
    if not isinstance(request.get("stream", False), bool):
        raise InvalidAnswer("stream", "must be true or false")
    recall = None
    if pack_id is None:
        if "scope" not in request:
            raise InvalidAnswer("scope", "is required (or use_pack_id)")
        if (request.get("view") or "holistic") not in VIEWS:
            raise InvalidAnswer("view", f"an answer reads the pack's items: use one of {list(VIEWS)}")
        recall = {k: v for k, v in request.items() if k in RECALL_FIELDS} | {"query": question}
    return AnswerSpec(question=question, model=model, max_tokens=max_tokens, use_pack_id=pack_id,
                      citation_mode=mode, diagnostics=diagnostics, idempotency_key=key, recall=recall)  # fmt: skip


def to_passages(pack: dict[str, Any]) -> tuple[Passage, ...]:
    return tuple(Passage(**p) for p in render.passages(pack["layers"]))


def llm_phase(llm: Any, written: Written, passages: tuple[Passage, ...]) -> dict[str, Any]:
    """The provenance trail's ``llm`` phase."""
    return {"phase": "llm", "provider": llm.provider, "model": written.completion.model,
            "passages": len(passages), "cited": [p.marker for p, _ in written.found],
            "elapsed_ms": written.llm_ms}  # fmt: skip


def llm_report(llm: Any, written: Written) -> dict[str, Any]:
    usage = written.completion.usage
    return {"answer_model": written.completion.model, "answer_provider": llm.provider,
            "answer_tokens": {"prompt": usage.prompt, "completion": usage.completion, "counted_by": usage.counted_by},
            "finish_reason": written.completion.finish_reason}  # fmt: skip


class AnswerService:
    """``Engine.answer`` and ``Engine.answer_stream``; the recall coordinator's narrator."""

    def __init__(self, ctx: Any, recall: Any, llms: LLMRouter) -> None:
        self.ctx = ctx
        self.recall = recall  # the RecallCoordinator: the one recall
        self.llms = llms
        recall.narrator = self.narrative

    async def answer(self, request: dict[str, Any], *, caller: str, tenant_id: str) -> dict[str, Any]:
        async for name, data in self.run(request, caller=caller, tenant_id=tenant_id, live=False):
            if name == "answer":
                return data
        raise AssertionError("an answer run ends with its answer")  # pragma: no cover

    async def stream(self, request: dict[str, Any], *, caller: str,
                     tenant_id: str) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        async for name, data in self.run(request, caller=caller, tenant_id=tenant_id, live=True):
            if name != "answer":
                yield name, data

    async def run(self, request: dict[str, Any], *, caller: str, tenant_id: str,
                  live: bool) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        """§10.2's events (``token``… when ``live``, ``citations``, ``provenance``, ``diagnostics``,
        ``done``), then ("answer", the response)."""
        started = trio.current_time()
        spec = validate(request, self.ctx.config)
        llm = self.llms.route(spec.model)
        reservation = None
        if spec.idempotency_key is not None:
            claim = await self.ctx.idempotency.begin(tenant_id, caller, FAMILY, spec.idempotency_key,
                                                     body_hash({k: v for k, v in request.items() if k != "stream"}))  # fmt: skip
            if isinstance(claim, Replay):
                response = {**claim.record["response"], "replayed": True}
                for piece in pieces(response["answer"]) if live else ():
                    yield "token", {"text": piece}
                for event in trailer(response):
                    yield event
                return
            reservation = claim
        try:
            response = None
            async for name, data in self._compose(spec, llm, caller, tenant_id, live, started):
                if name == "answer":
                    response = data
                else:
                    yield name, data
            if reservation is not None:
                await self.ctx.tables.write([self.ctx.idempotency.record_op(reservation, {"response": response})])
        except BaseException:
            if reservation is not None:
                self.ctx.idempotency.abort(reservation)
            raise
        if reservation is not None:
            self.ctx.idempotency.complete(reservation)
        for event in trailer(response):
            yield event

    async def _compose(self, spec: AnswerSpec, llm: Any, caller: str, tenant_id: str, live: bool,
                       started: float) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        t = trio.current_time()
        if spec.use_pack_id is not None:
            pack = self.recall.get_pack(spec.use_pack_id, caller)
            for capability in (SCOPE_READ_LOCAL, scope_read(pack["traversal"]), LLM_INVOKE):
                self.ctx.policy.check(caller, capability, pack["scope"])
        else:
            self.ctx.policy.check(caller, LLM_INVOKE, canonical_scope(spec.recall["scope"]))
            pack = await self.recall.recall(spec.recall, caller=caller, tenant_id=tenant_id)
        recall_ms = ms_since(t)
        passages = to_passages(pack)
        written = None
        prompt = Prompt(ANSWER, spec.question, passages, spec.max_tokens)
        async for name, data in self.write(llm, prompt, spec.citation_mode, live):
            if name == "written":
                written = data
            else:
                yield name, data
        provenance = {**pack["provenance"], "trail": [*pack["provenance"]["trail"], llm_phase(llm, written, passages)]}
        provenance.pop("markers", None)
        if spec.citation_mode != citing.NONE:
            provenance["markers"] = [{"marker": p.marker, "layer": p.layer, "id": p.id} for p in passages]
        response: dict[str, Any] = {
            "pack_id": pack["pack_id"], "answer": written.text, "supported": bool(written.found),
            "citations": citing.citations(spec.citation_mode, written.found), "provenance": provenance,
        }  # fmt: skip
        if spec.diagnostics != "none":
            response["diagnostics"] = {
                "recall_ms": recall_ms, "llm_ms": written.llm_ms, "total_ms": ms_since(started),
                "pack_used": {layer: len(pack["layers"][layer]) for layer in LAYERS if pack["layers"].get(layer)},
                "pack_reused": spec.use_pack_id is not None, **llm_report(llm, written),
            }  # fmt: skip
            if spec.diagnostics == "full":
                response["diagnostics"]["recall"] = pack.get("diagnostics")
        response["as_of"] = pack.get("as_of")
        yield "answer", response

    async def write(self, llm: Any, prompt: Prompt, mode: str, live: bool) -> AsyncIterator[tuple[str, Any]]:
        """``token`` events (when ``live``) with ``mode`` applied, then ("written", ``Written``)."""
        started = trio.current_time()
        completion = None
        written: list[str] = []
        shown: list[str] = []
        marker_filter = citing.MarkerFilter(mode, prompt.passages)
        async for piece in self._pieces(llm, prompt, live):
            if isinstance(piece, Completion):
                completion = piece
                continue
            written.append(piece)
            out = marker_filter.feed(piece)
            if out:
                shown.append(out)
                if live:
                    yield "token", {"text": out}
        if completion is None:  # a provider that streamed no Completion: we count
            text = "".join(written)
            usage = Usage(prompt_tokens(prompt), count_tokens(text), COUNTED_BY)
            completion = Completion(text=text, model=llm.model, usage=usage)
        found = citing.cited(completion.text, prompt.passages)
        tail = marker_filter.finish() + citing.sources_line(mode, found)
        if tail:
            shown.append(tail)
            if live:
                yield "token", {"text": tail}
        yield "written", Written("".join(shown), found, completion, ms_since(started))

    @staticmethod
    async def _pieces(llm: Any, prompt: Prompt, live: bool) -> AsyncIterator[str | Completion]:
        if not prompt.passages:  # nothing recalled: no model is asked (nor paid)
            text = NOTHING_TO_TELL if prompt.task == NARRATIVE else NO_SUPPORT
            for piece in pieces(text):
                yield piece
            yield Completion(text=text, model=llm.model, usage=Usage(0, 0, COUNTED_BY), finish_reason="empty_pack")
        elif live:
            async for piece in llm.stream(prompt):
                yield piece
        else:
            completion = await llm.complete(prompt)
            yield completion.text
            yield completion

    async def narrative(self, request: dict[str, Any], spec: RecallSpec, *, caller: str,
                        tenant_id: str) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        """A narrative pack (§9.1): a holistic recall told as a story by the deployment's default
        model; §10.2's events, then ("pack", the pack).  Its layers are empty; its ``pack_id`` is the
        recalled pack's (what ``use_pack_id`` reuses), its provenance that pack's."""
        started = trio.current_time()
        self.ctx.policy.check(caller, LLM_INVOKE, spec.scope)
        inner = {k: v for k, v in request.items() if k != "stream"} | {"view": "holistic", "traversal": spec.traversal}
        pack = await self.recall.recall(inner, caller=caller, tenant_id=tenant_id)
        recall_ms = ms_since(started)
        llm, passages = self.llms.default, to_passages(pack)
        written = None
        prompt = Prompt(NARRATIVE, spec.query, passages, self.ctx.config.answer_max_tokens)
        async for name, data in self.write(llm, prompt, spec.citation_mode, live=True):
            if name == "written":
                written = data
            else:
                yield name, data
        provenance = {**pack["provenance"], "trail": [*pack["provenance"]["trail"], llm_phase(llm, written, passages)]}
        if spec.citation_mode != citing.NONE:
            provenance["markers"] = [{"marker": p.marker, "layer": p.layer, "id": p.id} for p, _ in written.found]
        story = {**pack, "view": "narrative", "context_block": written.text, "provenance": provenance,
                 "layers": {layer: [] for layer in LAYERS}}  # fmt: skip
        yield "citations", citing.citations(spec.citation_mode, written.found)
        if "diagnostics" in pack:
            story["diagnostics"] = {**pack["diagnostics"], "recall_ms": recall_ms, "llm_ms": written.llm_ms,
                                    "total_ms": ms_since(started), **llm_report(llm, written)}  # fmt: skip
            yield "diagnostics", story["diagnostics"]
        yield "done", {"total_ms": ms_since(started), "pack_id": story["pack_id"]}
        yield "pack", story


def trailer(response: dict[str, Any]) -> list[tuple[str, Any]]:
    """The events after the tokens (§10.2), then ("answer", the response)."""
    events: list[tuple[str, Any]] = [("citations", response["citations"]), ("provenance", response["provenance"])]
    if "diagnostics" in response:
        events.append(("diagnostics", response["diagnostics"]))
    done = {"pack_id": response["pack_id"], "as_of": response["as_of"], "supported": response["supported"]}
    if response.get("replayed"):
        done["replayed"] = True
    return [*events, ("done", done), ("answer", response)]


def ms_since(started: float) -> float:
    return round((trio.current_time() - started) * 1000, 3)
