"""A Mem0 import stores the same events in either order mode (issue 14, session 33): the
``strict_temporal`` merge decodes each record from its sorted run (``extsort.decode``) and makes
the strings the file's records repeat one object each again (``extsort.share``), as the mapping
made them for ``batch_throughput``; values, never what they are."""

from __future__ import annotations

import copy

import orjson
import pytest

from cortexdb import EngineConfig, open_engine
from cortexdb.engine.transfer import extsort
from cortexdb.engine.transfer.sources import mem0

OPTIONS = {"ordering": "strict_temporal", "template": "org:acme/user:{user_id}", "imported_at": "2026-01-01T00:00:00Z"}


def document(n: int = 24) -> bytes:
    """A ``get_all`` document whose records use every field the mapping labels, in several shapes."""
    rows = []
    for i in range(n):
        row = {"id": f"m{i:03d}", "memory": f"memory {i} \u00e9", "hash": f"h{i}",
               "created_at": f"2026-01-0{1 + (n - i) % 9}T10:00:0{i % 10}+00:00", "user_id": f"u{i % 2}"}  # fmt: skip
        if i % 2:
            row["updated_at"] = f"2026-02-01T10:00:0{i % 10}Z"
        if i % 3 == 0:
            row["metadata"] = {"b": i, "a": [1, {"z": None}]}
        if i % 4 == 0:
            row["categories"] = ["work", "travel"]
        if i % 5 == 0:
            row.update(agent_id="helper", run_id=f"run{i % 2}", role="assistant", immutable=True)
        if i % 7 == 0:
            row.update(expiration_date="2027-01-01", attributed_to="x", synthesized=False, app_id="app")
        rows.append(row)
    return orjson.dumps({"results": rows})


def mapped(data: bytes, tmp_path) -> list:
    path = tmp_path / "mem0.json"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        return list(mem0.read(fh, "mem0_results", OPTIONS))


def test_decoded_records_share_the_strings_they_repeat_and_keep_their_values(tmp_path):
    items = mapped(document(), tmp_path)
    expected = [copy.deepcopy(item.envelope) for item in items]
    shared: dict[str, str] = {}
    decoded = []
    for ordinal, item in enumerate(items):
        _, payload = extsort.encode(item, ordinal, {})
        decoded.append(extsort.decode(payload, shared))
    for item, envelope in zip(decoded, expected, strict=True):
        assert orjson.dumps(item.envelope) == orjson.dumps({k: v for k, v in envelope.items() if k != "scope"})
        assert item.scope == envelope["scope"]
        context = item.envelope["context"]
        if context["source_recorded_at"] == context["observed_at"]:
            assert context["source_recorded_at"] is context["observed_at"]
    first, second = decoded[1].envelope, decoded[3].envelope  # two users' records, not an agent's
    assert first["modality"] is second["modality"] and first["content"]["kind"] is second["content"]["kind"]
    assert first["observed_actor"]["type"] is second["observed_actor"]["type"]
    assert first["subject"]["id"] is second["subject"]["id"]  # both u1
    assert decoded[0].envelope["subject"]["id"] is decoded[2].envelope["subject"]["id"]  # both u0
    assert decoded[0].envelope["subject"]["id"] == "user:u0" and first["subject"]["id"] == "user:u1"


def test_a_full_shared_table_is_cleared_not_grown(monkeypatch, tmp_path):
    monkeypatch.setattr(extsort, "SHARED_STRINGS", 4)
    shared: dict[str, str] = {}
    for ordinal, item in enumerate(mapped(document(6), tmp_path)):
        extsort.decode(extsort.encode(item, ordinal, {})[1], shared)
        assert len(shared) <= 4 + 8  # cleared before a record adds its few strings


def stored(events: list) -> list[bytes]:
    """The events as stored, less what each write assigns (ids, batch, WAL offset, record time,
    the episodes derived from them)."""
    out = []
    for event in events:
        event = dict(event)
        for name in ("id", "batch_id", "wal_offset", "derives"):  # derives: episodes, made in write order
            event.pop(name, None)
        event["context"] = {k: v for k, v in event["context"].items() if k != "recorded_at"}
        out.append(orjson.dumps(event))
    return sorted(out)


@pytest.mark.parametrize("backend", ["memory", "leveldb"])
async def test_a_mem0_import_stores_the_same_events_in_either_order_mode(tmp_path, backend):
    data = document()
    found = {}
    for ordering in ("strict_temporal", "batch_throughput"):
        where = {"path": str(tmp_path / ordering)} if backend == "leveldb" else {}
        config = EngineConfig(import_window=5, bulk_max_items=3, transfer_dir=str(tmp_path / f"t-{ordering}"))
        async with open_engine(backend, id_seed=1, config=config, **where) as engine:
            started = await engine.imports.start("mem0", data, {"scope_template": "org:acme/user:{user_id}",
                                                                 "options": {"ordering": ordering}})  # fmt: skip
            status = await engine.imports.wait(started["import_id"])
            assert (status["status"], status["items"]["written"]) == ("completed", 24), status
            found[ordering] = [stored((await engine.events(f"org:acme/user:u{u}", limit=100))["items"]) for u in (0, 1)]
    assert found["strict_temporal"] == found["batch_throughput"]
    assert all(len(scope) == 12 for scope in found["strict_temporal"])
