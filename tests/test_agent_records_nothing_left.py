"""Nothing left behind of signals, intake results and proposals (docs/signals.md, docs/intake.md,
docs/proposals.md): a marker planted in each is gone from every key and value of the store after
a forget (signals, and the intake results of redacted events) or an erasure (proposals, signals),
and, on LevelDB, from every file of the data dir."""

from __future__ import annotations

from pathlib import Path

from .conftest import envelope

MARKER = "qzvsignalx"
SCOPE = "org:acme/user:alice"


async def store_mentions(engine) -> list[bytes]:
    return [key for key, value in [kv async for kv in engine.store.scan()]
            if MARKER.encode() in key.lower() or MARKER.encode() in value.lower()]  # fmt: skip


def files_with_marker(path: Path) -> list[str]:
    return [str(p) for p in path.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes().lower()]


async def test_forget_leaves_no_signal_or_intake_result(engine, backend, tmp_path):
    await engine.signals.record({"scope": SCOPE, "subject": f"user:{MARKER}", "type": "frustration",
                                 "intensity": 0.7, "note": f"{MARKER} was upset"})  # fmt: skip
    await engine.experience(envelope(f"Bob met Carl. He lives in {MARKER.capitalize()}ville."), wait="consolidated")
    assert (await engine.intake.pending(SCOPE))["items"] and await store_mentions(engine)
    answer = await engine.forget({"scope": SCOPE, "layers": ["signals"], "selector": {"about_subject": f"user:{MARKER}"}})
    assert answer["deleted"]["signals"] == 1
    await engine.forget({"scope": SCOPE, "layers": ["events", "facts", "beliefs", "episodes"],
                         "cascade": "redact_events", "confirm_all": True})  # fmt: skip
    assert (await engine.intake.pending(SCOPE))["items"] == []
    assert await store_mentions(engine) == []
    if backend == "leveldb":
        assert files_with_marker(tmp_path / "data") == []


async def test_erasure_leaves_no_signal_or_proposal(engine, backend, tmp_path):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    await engine.signals.record({"scope": SCOPE, "subject": "user:alice", "type": "trust", "intensity": 0.4,
                                 "note": MARKER})  # fmt: skip
    await engine.proposals.propose({"scope": SCOPE, "experience": {k: v for k, v in envelope(f"My {MARKER} is on.").items()
                                                                   if k != "scope"}})  # fmt: skip
    assert await store_mentions(engine)
    accepted = await engine.erasures.execute({"scope": SCOPE})
    async with engine.subscribe(job_id=accepted["erasure_id"], events="erasure_complete", since_lifecycle_id="") as ended:
        await ended.__anext__()
    assert await store_mentions(engine) == []
    if backend == "leveldb":
        assert files_with_marker(tmp_path / "data") == []
