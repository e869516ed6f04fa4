"""Nothing left behind (issue 12): events carrying a unique marker are written, forgotten with
``redact_events``, and then no read path, index, cache, replay or (LevelDB) file on disk yields
the marker — while the audit rows of the calls are kept (§11.5) and still verify.

The marker is in values (texts, labels, literals), in storage keys (a fact's predicate: the
fact-index and claim keys; an entity's alias) and, capitalised, in entity names (the tenant's
entity dictionary); every check is case-insensitive."""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.errors import NotFound
from cortexdb.server.app import create_app
from cortexdb.server.call import RequestPolicyHook
from cortexdb.server.settings import ServerSettings

from .server_support import JWT_ISS, START, TENANT, Harness, Keys, body

MARKER = "qzvmarkerx"
NAME = MARKER.capitalize()  # a name: it becomes an entity (record, alias key)
SCOPE = "org:acme/user:alice"
BOB = "org:acme/user:bob"
LONG = " ".join(f"Paragraph {i} of my diary mentions the {MARKER} project once more." for i in range(60))
LONG_DOCUMENT = body(LONG, idempotency_key="k-long")  # passages
MARKED = [
    body(f"My favourite colour is {MARKER} blue."),
    body(f"I work as a {MARKER} engineer.", context={"observed_at": "2026-05-13T15:30:00Z",
                                                      "labels": [MARKER], "intent": f"tell about {MARKER}"}),
    body(f"My {MARKER}hobby is chess.", directives={"confidence_floor": 0.99}),  # rejected: its predicate is listed
    body(f"My {MARKER} colour is green."),  # the predicate qzvmarkerx_colour: fact index and claim keys
    body(f"I met {NAME} at the harbour. I work at {NAME} Labs."),  # entities: a mention, an object
    LONG_DOCUMENT,
]  # fmt: skip
PLAIN = [f"I like sport number {i}." for i in range(8)]  # keeps the indexes (and sealed segments) busy
EVERY_VERSION = "&include_superseded=true&valid_during=..&recorded_during=.."  # docs/time.md
EVERYTHING = {"events": "&include_excluded=true", "facts": EVERY_VERSION,
              "beliefs": "&include_deprecated=true" + EVERY_VERSION, "episodes": EVERY_VERSION,
              "understanding": ""}  # fmt: skip


@asynccontextmanager
async def served(tmp_path: Path, backend: str):
    clock = ManualClock(START)
    keys = Keys(tmp_path, clock)
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_segment_size=4)
    where = {"path": str(tmp_path / "data")} if backend == "leveldb" else {}
    async with cortexdb.open_engine(backend, clock=clock, id_seed=11, config=config, policy=RequestPolicyHook(),
                                    **where) as engine:  # fmt: skip
        settings = ServerSettings(preset="on_prem_enterprise", backend=backend, tenant=TENANT,
                                  issuer_dirs=[str(keys.dir)], jwt_issuers=[(JWT_ISS, str(keys.jwks))],
                                  operators=("user:root",))  # fmt: skip
        app = create_app(engine, settings)
        async with app.test_app() as test_app:
            yield Harness(app, test_app.test_client(), keys, clock, engine)


def lane(h, scope=SCOPE):
    return h.engine._supervisor.actor(scope).lane.state


def leaks(texts: list[str]) -> list[str]:
    """The texts holding the marker, in any case."""
    return [text[:200] for text in texts if MARKER in text.casefold()]


def files_with_marker(path: Path) -> list[str]:
    """Every file under ``path`` (MANIFEST, logs, CURRENT, tables, blobs) holding the marker."""
    return [str(p) for p in path.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes().lower()]


async def plant_in_leveldb_logs(h, path: Path) -> None:
    """Make LevelDB's info log quote the marker, as a manual compaction starting at a key does (a
    forget's compaction stops at whatever key its input ends with): the forget must remove it."""
    alias = h.engine.tables.entity_aliases.key((TENANT, MARKER))  # the name's alias key
    await h.engine.store.compact(alias, alias + b"\x00")  # the store's own: no reopen after it
    assert "LOG" in {Path(name).name for name in files_with_marker(path)}


def marked_terms(h) -> list[str]:
    """Terms of the scope's BM25 vocabulary (dead ones included) that hold the marker."""
    return [t for index in lane(h).text_index.parts() for t in index.terms() if MARKER in t]


def held_vectors(h) -> set[str]:
    held = set()
    for index in lane(h).vector_index._indexes.values():
        held.update(d for segment in index._segments for d in segment.ids)
        held.update(index._delta_ids)
    return held


async def write(h) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {"marked": [], "plain": []}
    for document in MARKED:
        response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=document)
        assert response.status_code == 200, data
        ids["marked"].append(data["event_id"])
    for text in PLAIN:
        response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text))
        ids["plain"].append(data["event_id"])
    await h.call("POST", "/v1/experience?wait=consolidated", "user:bob", json=body("I like tea.", scope=BOB))
    await h.engine.flush(SCOPE, seal=True)
    return ids


async def text_of(h, method: str, path: str, payload=None) -> str:
    response, data = await h.call(method, path, json=payload)
    assert response.status_code in (200, 202, 404, 410), (path, response.status_code, data)
    return json.dumps(data) if data is not None else (await response.get_data()).decode()


async def first_chunk(h, path: str) -> str:
    """The first body chunk of an SSE stream (a resume sends what it replays first)."""
    with trio.fail_after(10), trio.CancelScope() as done:  # a hang guard only
        async with h.client.request(path, method="GET", headers=h.as_("user:alice")) as connection:
            await connection.send_complete()
            chunk = await connection.receive()
            done.cancel()
    return chunk.decode()


async def layer_reads(h, ids, records) -> list[str]:
    texts = []
    for path in ("events", "episodes", "facts", "beliefs", "understanding"):
        texts.append(await text_of(h, "GET", f"/v1/{path}?scope={SCOPE}&limit=1000{EVERYTHING[path]}"))
    for event_id in ids["marked"] + ids["plain"]:
        texts.append(await text_of(h, "GET", f"/v1/events/{event_id}"))
        texts.append(await text_of(h, "GET", f"/v1/lifecycle/memory-event/{event_id}"))
    for record in records:
        layer = {"fact": "facts", "belief": "beliefs", "ep": "episodes"}[record["id"].split("_", 1)[0]]
        texts.append(await text_of(h, "GET", f"/v1/{layer}/{record['id']}?scope={SCOPE}"))
        if layer == "facts":
            texts.append(await text_of(h, "GET", f"/v1/facts/{record['id']}/supports?scope={SCOPE}"))
            timeline = await text_of(h, "GET", f"/v1/facts/timeline?scope={SCOPE}&subject=user:alice&predicate={record['predicate']}")
            texts.append(timeline.replace(json.dumps(record["predicate"]), '"(the predicate asked for)"'))  # not its echo
        if layer == "beliefs":
            texts.append(await text_of(h, "GET", f"/v1/beliefs/why?scope={SCOPE}&belief_id={record['id']}"))
    return texts


async def recalls(h) -> list[str]:
    texts = []
    for mode in ("hybrid", "bm25", "vector"):
        h.engine.set_recall_mode(mode)
        for view in ("raw", "granular", "holistic", "structured"):
            for traversal in ("local", "holistic", "descend"):
                for query in (MARKER, f"{MARKER} favourite colour engineer hobby diary", ""):
                    request = {"scope": SCOPE, "view": view, "traversal": traversal, "query": query,
                               "diagnostics": "full"}  # fmt: skip
                    texts.append(await text_of(h, "POST", "/v1/recall", request))
        stream = h.engine.recall_stream({"scope": SCOPE, "query": MARKER}, caller="user:alice")  # the §10.1 frames
        texts += [json.dumps(frame) async for frame in stream]
    h.engine.set_recall_mode("hybrid")
    return texts


@pytest.mark.parametrize("backend", ["memory", "leveldb"])
async def test_a_forget_leaves_no_trace_of_the_marker(tmp_path, backend):
    async with served(tmp_path, backend) as h:
        ids = await write(h)
        records = []
        for layer in ("facts", "beliefs", "episodes"):
            _, page = await h.call("GET", f"/v1/{layer}?scope={SCOPE}&limit=1000{EVERYTHING[layer]}")
            records += [r for r in page["items"] if MARKER in json.dumps(r).casefold()]
        assert {r["id"].split("_")[0] for r in records} == {"fact", "belief", "ep"}
        assert {"qzvmarkerx_colour", "works_at"} <= {r.get("predicate") for r in records}
        assert await h.engine._ctx.entities.find(TENANT, NAME) is not None  # the names are entities
        pack = await h.engine.recall({"scope": SCOPE, "query": MARKER, "idempotency_key": "r1"}, caller="user:alice")
        assert MARKER in json.dumps(pack) and marked_terms(h)
        assert any(index.segment_sizes for index in lane(h).vector_index._indexes.values())  # sealed
        gone = {r["id"] for r in records} | set(ids["marked"])
        assert gone & held_vectors(h)
        _, rows = await h.call("GET", f"/v1/lifecycle?scope={SCOPE}&limit=1000")
        assert MARKER in json.dumps(rows)  # the rejected predicate is in the replay buffer
        _, audit_before = await h.call("GET", "/v1/audit?limit=1000")
        if backend == "leveldb":
            await plant_in_leveldb_logs(h, tmp_path / "data")

        request = {"scope": SCOPE, "layers": ["events", "episodes", "facts", "beliefs", "understanding"],
                   "selector": {"about_subject": "user:alice"}, "cascade": "redact_events",
                   "idempotency_key": "forget-1"}  # fmt: skip
        response, forgot = await h.call("POST", "/v1/forget", json=request)
        assert response.status_code == 200, forgot
        assert forgot["deleted"]["events"] == len(MARKED) + len(PLAIN)

        texts = await layer_reads(h, ids, records) + await recalls(h)
        resumed = await first_chunk(h, f"/v1/lifecycle/stream?scope={SCOPE}&since_lifecycle_id={rows['items'][0]['lifecycle_id']}")
        assert resumed.count("event: extracted") == len(MARKED) + len(PLAIN)  # the replay, rewritten
        texts.append(resumed)
        _, rows_after = await h.call("GET", f"/v1/lifecycle?scope={SCOPE}&limit=1000")
        texts.append(json.dumps(rows_after))
        texts.append(await text_of(h, "POST", "/v1/experience", LONG_DOCUMENT))  # replayed by its key, and the forget
        texts.append(await text_of(h, "GET", "/v1/experience/by-idempotency-key/k-long"))
        texts.append(await text_of(h, "POST", "/v1/forget", request))
        texts.append(await text_of(h, "POST", "/v1/recall", {"scope": SCOPE, "query": MARKER, "idempotency_key": "r1"}))
        assert leaks(texts) == []
        with pytest.raises(NotFound):
            h.engine.get_pack(pack["pack_id"])  # use_pack_id
        assert marked_terms(h) == [] and not gone & held_vectors(h)
        for name in (NAME, f"{NAME} Labs", "user:alice"):  # the entities only these events mentioned
            assert await h.engine._ctx.entities.find(TENANT, name) is None
        assert await h.engine._ctx.entities.find(TENANT, "user:bob") is not None  # bob's event survives

        _, audit_after = await h.call("GET", "/v1/audit?limit=1000")  # kept (§11.5) and verifiable
        kept = {r["id"] for r in audit_before["items"]}
        assert kept <= {r["id"] for r in audit_after["items"]}
        write_row = next(r for r in audit_after["items"] if r["endpoint"] == "POST /v1/experience")
        _, verified = await h.call("POST", "/v1/audit/verify", json={"audit_id": write_row["id"],
                                                                     "body": json.dumps(MARKED[0])})  # fmt: skip
        assert verified["audit_id"] == write_row["id"] and verified["match"] is True, verified
        if backend == "leveldb":  # every file: tables, MANIFEST-*, *.log, LOG*, CURRENT — the engine still open
            assert files_with_marker(tmp_path / "data") == []
            assert {"CURRENT", "LOG"} <= set(os.listdir(tmp_path / "data"))  # the grep looked at real files
            assert any(name.startswith("MANIFEST-") for name in os.listdir(tmp_path / "data"))
        done = await h.engine.experience(body("I like chess."), caller="user:alice", wait="consolidated")
        assert any(d.startswith("fact_") for d in done.derives)  # and the engine goes on
