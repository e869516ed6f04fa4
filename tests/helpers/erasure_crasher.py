"""A process that starts a GDPR erasure on a LevelDB engine and stops dead in its delete phase.

Used by tests/test_erasure_resume.py, which SIGKILLs it there.  It captures ``EVENTS`` events into
``org:acme/user:alice`` (one consolidated into ``ws:team``), starts the erasure with a chunk of 5,
and after two deletion steps prints ``stopped <erasure_id>`` and waits to be killed.
Usage: erasure_crasher.py DATA_DIR
"""

import sys

import trio

import cortexdb
from cortexdb import EngineConfig

ALICE = "org:acme/user:alice"
EVENTS = 40


def item(i: int) -> dict:
    return {"modality": "conversation", "content": {"kind": "message", "role": "user", "text": f"I have {i} cats."},
            "context": {"observed_at": f"2026-05-13T10:00:{i % 60:02d}Z"}}  # fmt: skip


async def main(path: str) -> None:
    config = EngineConfig(erasure_chunk=5, default_caller="user:alice")
    async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
        await engine.experience_bulk({"scope": ALICE, "items": [item(i) for i in range(EVENTS - 1)]})
        await engine.experience({"scope": ALICE, **item(EVENTS), "directives": {"consolidate_into": "ws:team"}},
                                wait="consolidated")  # fmt: skip
        await engine.flush(ALICE)
        await engine.flush("ws:team")

        async def stop_dead(job_id: str, phase: str, where: str) -> None:
            record = await engine.erasures.jobs.get(job_id)
            if phase == "delete" and record["state"].get("delete_steps_done", 0) >= 2:
                print("stopped", job_id, flush=True)
                await trio.sleep_forever()

        engine.erasures.jobs.hook = stop_dead
        await engine.erasures.execute({"scope": ALICE})
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
