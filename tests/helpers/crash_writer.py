"""A process that writes experiences to a LevelDB engine and prints each acknowledged event id.

Used by tests/test_crash.py, which SIGKILLs it mid-stream.  Usage: crash_writer.py DATA_DIR
"""

import sys

import trio

import cortexdb


async def main(path: str) -> None:
    async with cortexdb.open_engine("leveldb", path=path) as engine:

        async def writer(worker: int) -> None:
            for i in range(100_000):
                body = {
                    "scope": f"org:acme/user:u{worker}",
                    "modality": "conversation",
                    "content": {
                        "kind": "message",
                        "role": "user",
                        "text": f"I have {i} cats. My lucky number is {i}.",
                    },
                    "context": {"observed_at": f"2026-05-13T10:00:{i % 60:02d}Z"},
                    "idempotency_key": f"w{worker}-{i}",
                }
                result = await engine.experience(body, caller=f"user:u{worker}", wait="captured")
                print(result.event_id, result.wal_offset, flush=True)

        async with trio.open_nursery() as nursery:
            for worker in range(4):
                nursery.start_soon(writer, worker)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
