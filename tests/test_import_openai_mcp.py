"""Imports of ChatGPT exports and of the MCP memory server's memory.jsonl (reference §8.11, §15.4;
tests/data/import/README.md §4-5), on the memory backend with an injected clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cortexdb import ManualClock, open_engine
from cortexdb.errors import InvalidBody, UnsupportedFormat

from .server_support import server

DATA = Path(__file__).parent / "data" / "import"
CONVERSATIONS = DATA / "openai" / "conversations.json"
MEMORIES = DATA / "openai" / "memories.json"
MCP = DATA / "mcp" / "memory.jsonl"
START = "2026-08-01T09:00:00Z"
C1, C2 = "6a48e1d0-3c52-8005-9d1e-4b7f20c6a913", "6a8b3f27-09d4-8007-a2c5-7e1d94b0f6e2"


def engine(clock=None):
    return open_engine("memory", id_seed=1, clock=clock or ManualClock(START))


async def run_import(engine, source, data, **request):
    request.setdefault("scope_template", "org:acme/user:alice")
    started = await engine.imports.start(source, data, request)
    return started, await engine.imports.wait(started["import_id"])


async def events_of(engine, scope):
    return (await engine.events(scope, limit=1000, include_excluded=True))["items"]


def by_node(events):
    return {e["context"]["labels"]["openai_node_id"]: e for e in events if "openai_node_id" in e["context"]["labels"]}


# -- ChatGPT conversations.json -------------------------------------------------------------------
async def test_chatgpt_conversations_import_the_said_messages_with_their_times_and_branches():
    async with engine() as db:
        started, status = await run_import(db, "openai", CONVERSATIONS.read_bytes(),
                                           scope_template="org:acme/user:alice/session:{conversation_id}",
                                           options={"user_id": "alice"})  # fmt: skip
        assert started["format"] == "chatgpt_conversations" and status["status"] == "completed", status
        # 22 message nodes: 7 hidden ones skipped (system, bio tool reply, thoughts, recap,
        # python call and output, the second system node); 15 events
        assert status["items"] == {"read": 22, "written": 15, "replayed": 0, "skipped": 7, "failed": 0}
        first = await events_of(db, f"org:acme/user:alice/session:{C1}")
        second = await events_of(db, f"org:acme/user:alice/session:{C2}")
        assert (len(first), len(second)) == (13, 2)
        texts = " | ".join(e["content"]["text"] for e in first)
        for hidden in ("Model set context updated.", "Thought for 4s", "pace = 115*60", "1:49:01\n21.0975"):
            assert hidden not in texts
        nodes = by_node(first)
        user = nodes["81756465-c24a-4d9a-8e14-b56d4ae7d615"]
        assert user["content"] == {"kind": "message", "role": "user", "text": user["content"]["text"]}
        assert user["context"]["observed_at"] == "2026-06-10T18:31:42.006Z"  # message create_time (epoch s)
        assert user["observed_actor"]["id"] == "user:alice" and user["observed_actor"]["session"] == C1
        assert user["context"]["labels"]["openai_on_path"] is True and user["directives"].get("extract") != []
        reply = nodes["51a5594d-58a7-4760-8a24-32d07f04e814"]
        assert reply["observed_actor"]["id"] == "agent:chatgpt" and reply["subject"]["id"] == "user:alice"
        assert reply["context"]["labels"]["openai_model_slug"] == "gpt-5-2"
        # the edited prompt and its answer: abandoned branch, kept but not extracted
        for node in ("3a99abe2-7116-4b9b-9dcc-3c5543f37be8", "2c36b989-86dc-441b-a490-0f68e907f532"):
            assert nodes[node]["context"]["labels"]["openai_on_path"] is False
            assert nodes[node]["directives"]["extract"] == []
        image = nodes["f3686b11-5395-4819-9d41-94c6aa931f22"]
        assert image["content"]["text"] == "This morning's tempo run. On pace?"
        assert json.loads(image["context"]["labels"]["openai_assets"])[0]["asset_pointer"].startswith("sediment://")
        write = nodes["9a652732-d477-4144-99e0-292400ba112b"]  # assistant -> bio: a memory saved
        assert write["modality"] == "imported" and write["context"]["labels"]["openai_memory_write"] is True
        assert write["content"]["text"] == "User's half-marathon target time is now 1:55 (previously 2:05)."
        # the memory snapshot: one event per saved memory, observed on its date
        snapshot = sorted((e["context"]["observed_at"], e["content"]["text"]) for e in first
                          if e["context"]["labels"].get("openai_content_type") == "model_editable_context")  # fmt: skip
        assert snapshot == [("2026-03-01T00:00:00Z", "Half-marathon target time is 2:05."),
                            ("2026-03-01T00:00:00Z", "Is training for the Lyon Half Marathon on 2026-10-18."),
                            ("2026-03-05T00:00:00Z", "Prefers metric units.")]  # fmt: skip
        instructions = [e for e in first if e["context"]["labels"].get("openai_custom_instructions")]
        assert [e["content"]["text"] for e in instructions] == [
            "About me: I'm a designer in Oslo and a recreational runner.\nHow to respond: Metric units. Be brief."]
        assert instructions[0]["context"]["observed_at"] == "2026-06-10T18:30:00.10231Z"  # no time: the conversation's
        # the "do not remember" conversation: stored, nothing derived from it
        assert all(e["directives"]["extract"] == [] and e["context"]["labels"]["openai_do_not_remember"] for e in second)
        assert second[0]["context"]["labels"]["openai_is_archived"] is True
        _, again = await run_import(db, "openai", CONVERSATIONS.read_bytes(),
                                    scope_template="org:acme/user:alice/session:{conversation_id}",
                                    options={"user_id": "alice"})  # fmt: skip
        assert again["items"] == {"read": 22, "written": 0, "replayed": 15, "skipped": 7, "failed": 0}


async def test_chatgpt_options_choose_the_branch_and_the_hidden_messages():
    async with engine() as db:
        _, current = await run_import(db, "openai", CONVERSATIONS.read_bytes(), options={"branches": "current"})
        assert current["items"]["written"] == 13 and current["items"]["skipped"] == 9
        assert all(e["context"]["labels"].get("openai_on_path") is not False
                   for e in await events_of(db, "org:acme/user:alice"))  # fmt: skip
    async with engine() as db:
        _, hidden = await run_import(db, "openai", CONVERSATIONS.read_bytes(), options={"include_hidden": True})
        # the bio reply, thoughts, recap, python call and output; the empty system nodes stay skipped
        assert hidden["items"]["written"] == 20 and hidden["items"]["skipped"] == 2
        extra = [e for e in await events_of(db, "org:acme/user:alice") if e["context"]["labels"].get("openai_hidden")]
        assert sorted(e["context"]["labels"]["openai_content_type"] for e in extra) == [
            "code", "execution_output", "reasoning_recap", "text", "thoughts"]
        assert all(e["directives"]["extract"] == [] for e in extra)
        assert {e["context"]["labels"]["openai_recipient"] for e in extra} >= {"python"}
        with pytest.raises(InvalidBody):
            await db.imports.start("openai", CONVERSATIONS.read_bytes(),
                                   {"scope_template": "org:acme", "options": {"branches": "some"}})  # fmt: skip


async def test_the_memory_snapshot_and_custom_instructions_repeated_in_conversations_import_once():
    conversations = json.loads(CONVERSATIONS.read_text())
    copy = json.loads(json.dumps(conversations[0]))
    copy["id"] = copy["conversation_id"] = "6a48e1d0-0000-8005-9d1e-4b7f20c6a913"
    copy["current_node"] = None  # no current node: the path ends at the latest leaf (the same one)
    async with engine() as db:
        _, status = await run_import(db, "openai", json.dumps({"conversations": [conversations[0], copy]}).encode())
        assert status["format"] == "chatgpt_conversations"
        # the copy adds its 8 messages and memory write; its snapshot and instructions are known
        assert status["items"]["written"] == 13 + 9 and status["items"]["failed"] == 0
        events = await events_of(db, "org:acme/user:alice")
        assert sum(bool(e["context"]["labels"].get("openai_custom_instructions")) for e in events) == 1
        assert sum(e["context"]["labels"].get("openai_content_type") == "model_editable_context" for e in events) == 3
        copied = [e for e in events if e["context"]["labels"].get("openai_conversation_id") == copy["id"]
                  and e["modality"] == "conversation"]  # fmt: skip
        assert sorted(e["context"]["labels"]["openai_on_path"] for e in copied) == [False, False] + [True] * 6


async def test_one_conversation_object_imports_too():
    conversation = json.loads(CONVERSATIONS.read_text())[1]
    async with engine() as db:
        _, status = await run_import(db, "openai", json.dumps(conversation).encode())
        assert status["format"] == "chatgpt_conversations" and status["items"]["written"] == 2


def test_conversations_are_parsed_one_at_a_time(tmp_path):
    from cortexdb.engine.transfer.sources import openai

    conversation = json.loads(CONVERSATIONS.read_text())[1]
    copies = []
    for n in range(400):
        copy = json.loads(json.dumps(conversation))
        copy["id"] = copy["conversation_id"] = f"conv-{n}"
        copies.append(copy)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(copies))
    options = {"template": "org:acme", "imported_at": START}
    with open(path, "rb") as fh:
        items = openai.read(fh, openai.sniff(str(path)), options)
        first = next(item for item in items if item.envelope is not None)
        # the first event comes before the parser has read a tenth of the file
        assert first.envelope["context"]["labels"]["openai_conversation_id"] == "conv-0"
        assert fh.tell() < path.stat().st_size / 10
        assert sum(1 for item in items if item.envelope is not None) == 400 * 2 - 1


async def test_bad_chatgpt_records_are_reported_with_their_position():
    conversations = json.loads(CONVERSATIONS.read_text())
    broken_node = json.loads(json.dumps(conversations[1]))
    broken_node["mapping"]["2898f3ef-589a-4a07-95e7-63e055b955f8"]["message"]["author"] = "user"
    records = [conversations[0], {"title": "no mapping", "id": "x"}, broken_node]  # the first one names the format
    async with engine() as db:
        _, status = await run_import(db, "openai", json.dumps(records).encode())
        assert status["status"] == "completed"
        assert [(e["record"], e["error"]) for e in status["errors"]] == [(1, "invalid_record"), (2, "invalid_record")]
        assert "2898f3ef-589a-4a07-95e7-63e055b955f8" in status["errors"][1]["detail"]
        assert status["items"]["written"] == 1 + 13 and status["items"]["failed"] == 2
        _, aborted = await run_import(db, "openai", json.dumps(records).encode(), options={"on_error": "abort"})
        assert aborted["status"] == "failed" and "record 1" in aborted["error"]["message"]
    async with engine() as db:  # a file cut in its second conversation: the first is written, the break reported
        data = CONVERSATIONS.read_bytes()
        _, status = await run_import(db, "openai", data[: data.index(b'"title": "Out of office note"') + 40])
        assert status["status"] == "completed" and status["items"]["written"] == 13
        assert [(e["record"], e["error"]) for e in status["errors"]] == [(1, "invalid_json")]
        for shape in (b'{"foo": 1}', b'"hello"', b"[1, 2]", b'[{"title": "x"}]', b"", b"{not json"):
            with pytest.raises(UnsupportedFormat):
                await db.imports.start("openai", shape, {"scope_template": "org:acme"})


# -- ChatGPT memories ------------------------------------------------------------------------------------
async def test_chatgpt_memories_import_with_their_latest_time_and_reimport_replays():
    memories = json.loads(MEMORIES.read_text())["memories"]
    async with engine() as db:
        started, status = await run_import(db, "openai", MEMORIES.read_bytes(), options={"user_id": "alice"})
        assert started["format"] == "chatgpt_memories"
        assert status["items"] == {"read": 3, "written": 3, "replayed": 0, "skipped": 0, "failed": 0}
        events = {e["context"]["labels"]["openai_memory_id"]: e for e in await events_of(db, "org:acme/user:alice")}
        edited = events[memories[1]["id"]]
        assert edited["content"]["text"] == memories[1]["content"] and edited["modality"] == "imported"
        # the text is the memory's latest version: observed when it was last updated
        assert edited["context"]["observed_at"] == edited["context"]["source_recorded_at"] == "2026-06-10T18:31:44.87Z"
        assert edited["context"]["labels"]["openai_created_timestamp"] == memories[1]["created_timestamp"]
        assert edited["subject"]["id"] == "user:alice" and edited["context"]["labels"]["openai_status"] == "warm"
        _, again = await run_import(db, "openai", MEMORIES.read_bytes(), options={"user_id": "alice"})
        assert again["items"]["written"] == 0 and again["items"]["replayed"] == 3
        bare = json.dumps([{"content": "Likes trail running."}, {"content": ""}]).encode()
        _, status = await run_import(db, "openai", bare, options={"observed_at": "2026-07-01T00:00:00Z"})
        assert status["format"] == "chatgpt_memories" and status["items"]["written"] == 1
        assert [(e["record"], e["error"]) for e in status["errors"]] == [(1, "invalid_record")]


# -- MCP memory server -------------------------------------------------------------------------------------
async def test_mcp_entities_and_relations_import_as_events_and_facts():
    clock = ManualClock(START)
    async with engine(clock) as db:
        started, status = await run_import(db, "mcp", MCP.read_bytes(), scope_template="org:acme/app:memory")
        assert started["format"] == "mcp_memory_jsonl" and status["status"] == "completed"
        # 6 entities (a type fact each), 13 observations, 6 relations
        assert status["items"] == {"read": 25, "written": 25, "replayed": 0, "skipped": 0, "failed": 0}
        events = await events_of(db, "org:acme/app:memory")
        observations = [e for e in events if e["content"]["kind"] == "text"]
        assert len(observations) == 13
        first = observations[0]
        assert first["content"]["text"] == "Alice Moreau: Product designer at Atelier Nord in Lyon"
        assert first["subject"]["id"] == "entity:Alice_Moreau" and first["observed_actor"]["id"] == "app:mcp_memory"
        labels = first["context"]["labels"]
        assert labels["mcp_observation"] == "Product designer at Atelier Nord in Lyon"
        assert labels["mcp_entity_type"] == "person" and labels["mcp_observed_at_assumed"] is True
        assert all(e["context"]["observed_at"] == START and e["context"].get("source_recorded_at") is None for e in events)
        await db.flush("org:acme/app:memory")
        facts = (await db.facts("org:acme/app:memory", limit=100))["items"]
        relations = sorted((f["subject"]["name"], f["predicate"], f["object"]["name"]) for f in facts
                           if f["object"]["type"] == "entity")  # fmt: skip
        assert relations == sorted(
            (r["from"], r["relationType"], r["to"]) for r in map(json.loads, MCP.read_text().splitlines())
            if r["type"] == "relation")  # fmt: skip
        types = {f["subject"]["name"]: f["object"]["value"] for f in facts if f["predicate"] == "entity_type"}
        assert types["Lyon_Half_Marathon"] == "event" and len(types) == 6
        alice = (await db.facts("org:acme/app:memory", subject="Alice_Moreau", limit=100))["items"]
        assert {f["predicate"] for f in alice} == {"entity_type", "worked_at", "works_at", "registered_for", "knows"}


async def test_mcp_reimport_replays_and_writes_only_what_is_new_at_its_time():
    clock = ManualClock(START)
    async with engine(clock) as db:
        await run_import(db, "mcp", MCP.read_bytes(), scope_template="org:acme/app:memory")
        clock.advance(hours=5)  # a later sync of the same file (keys live 24 h), with one relation and observation more
        more = MCP.read_bytes().replace(b'"Prefers metric units"', b'"Prefers metric units","Runs 4 days a week"')
        more += b'\n{"type":"relation","from":"Alice_Moreau","to":"Carol_Diaz","relationType":"knows"}'
        _, status = await run_import(db, "mcp", more, scope_template="org:acme/app:memory")
        assert status["items"] == {"read": 27, "written": 2, "replayed": 25, "skipped": 0, "failed": 0}, status
        events = await events_of(db, "org:acme/app:memory")
        new = [e for e in events if e["context"]["observed_at"] != START]
        assert len(events) == 27 and len(new) == 2
        assert {e["context"]["observed_at"] for e in new} == {"2026-08-01T14:00:00Z"}
        await db.flush("org:acme/app:memory")
        knows = (await db.facts("org:acme/app:memory", subject="Alice_Moreau", limit=100))["items"]
        # the graph's relations all hold at once: a second "knows" does not supersede the first
        assert sorted(f["object"]["name"] for f in knows if f["predicate"] == "knows") == ["Bob_Lefevre", "Carol_Diaz"]
        _, given = await run_import(db, "mcp", MCP.read_bytes(), scope_template="org:acme/app:other",
                                    options={"observed_at": "2026-05-01T00:00:00Z"})  # fmt: skip
        assert given["items"]["written"] == 25
        assert {e["context"]["observed_at"] for e in await events_of(db, "org:acme/app:other")} == {"2026-05-01T00:00:00Z"}


async def test_bad_mcp_lines_are_reported_with_their_line_number():
    lines = [b'{"type":"entity","name":"Alice","entityType":"person","observations":["Lives in Lyon"]}',
             b'{"type":"entity","name":"Bob","entityType":"person","observations":["Sous-chef"]',
             b'{"type":"entity","entityType":"person","observations":[]}', b"[1]",
             b'{"type":"note","text":"dropped by the server too"}',
             b'{"type":"relation","from":"Alice","to":"Bob"}',
             b'{"type":"entity","name":"Eve","entityType":"person","observations":[3]}',
             b'{"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}']  # fmt: skip
    async with engine() as db:
        _, status = await run_import(db, "mcp", b"\n".join(lines), scope_template="org:acme/app:memory")
        assert status["status"] == "completed"
        assert [(e["line"], e["error"]) for e in status["errors"]] == [
            (2, "invalid_json"), (3, "invalid_record"), (4, "invalid_record"), (6, "invalid_record"), (7, "invalid_record")]
        assert "relationType" in status["errors"][3]["detail"]
        assert status["items"] == {"read": 9, "written": 3, "replayed": 0, "skipped": 1, "failed": 5}
        _, aborted = await run_import(db, "mcp", b"\n".join(lines), scope_template="org:acme/app:x",
                                      options={"on_error": "abort"})  # fmt: skip
        assert aborted["status"] == "failed" and aborted["error"]["error_code"] == "INVALID_BODY"
        assert "line 2" in aborted["error"]["message"]
        _, empty = await run_import(db, "mcp", b"", scope_template="org:acme/app:y")  # an empty graph
        assert empty["status"] == "completed" and empty["items"]["read"] == 0
        for shape in (b'{"memories": []}', b"not json\n", b"[1]"):
            with pytest.raises(UnsupportedFormat):
                await db.imports.start("mcp", shape, {"scope_template": "org:acme"})


# -- over HTTP -----------------------------------------------------------------------------------------
async def test_an_mcp_memory_file_imports_over_http_and_recalls(tmp_path):
    async with server(tmp_path) as h:
        response, started = await h.call("POST", "/v1/import/mcp?scope_template=user:alice/app:memory",
                                         hdrs={**h.as_("user:alice"), "Content-Type": "application/x-ndjson"},
                                         data=MCP.read_bytes())  # fmt: skip
        assert response.status_code == 202, started
        assert started["format"] == "mcp_memory_jsonl" and started["scope"] == "user:alice/app:memory"
        status = await h.engine.imports.wait(started["import_id"])
        assert status["status"] == "completed" and status["items"]["written"] == 25, status
        response, pack = await h.call("POST", "/v1/recall", json={"scope": "user:alice/app:memory",
                                                                  "query": "Where did Bob Lefevre work?"})  # fmt: skip
        assert response.status_code == 200, pack
        assert any("Bob Lefevre" in (e["content"].get("text") or "") for e in pack["layers"]["events"])
        # ChatGPT's export, one scope per conversation, the user named in the query string
        response, started = await h.call(
            "POST", "/v1/import/openai?scope_template=user:alice/session:{conversation_id}&user_id=alice",
            data=CONVERSATIONS.read_bytes())  # fmt: skip
        assert response.status_code == 202 and started["format"] == "chatgpt_conversations", started
        status = await h.engine.imports.wait(started["import_id"])
        assert status["items"]["written"] == 15, status
        response, pack = await h.call("POST", "/v1/recall", json={"scope": "user:alice", "view": "descend",
                                                                  "query": "half marathon target time"})  # fmt: skip
        assert response.status_code == 200, pack
        found = [e for e in pack["layers"]["events"] if e["scope"] == f"user:alice/session:{C1}"]
        assert found and all(e["observed_actor"]["id"] in ("user:alice", "agent:chatgpt") for e in found)
        response, bad = await h.call("POST", "/v1/import/mcp?scope_template=user:alice/app:memory", data=b'{"x": 1}')
        assert response.status_code == 422 and bad["error_code"] == "UNSUPPORTED_FORMAT"
        response, bad = await h.call("POST", "/v1/import/openai?scope_template=user:alice&branches=some",
                                     data=MEMORIES.read_bytes())
        assert response.status_code == 400 and bad["error_code"] == "INVALID_BODY", bad
        response, bad = await h.call("POST", "/v1/import/openai",
                                     json={"scope_template": "user:alice", "options": {"branches": 3},
                                           "source": {"format": "chatgpt_memories", "inline": MEMORIES.read_text()}})  # fmt: skip
        assert response.status_code == 400 and bad["error_code"] == "INVALID_BODY", bad
