"""Kill a real writer process with SIGKILL, reopen its LevelDB data dir, check nothing was lost."""

import os
import signal
import sys

import trio

import cortexdb

HELPER = os.path.join(os.path.dirname(__file__), "helpers", "crash_writer.py")


async def test_sigkill_loses_no_acknowledged_event_and_derivations_complete(tmp_path):
    path = str(tmp_path / "crash")
    acknowledged: dict[str, int] = {}
    process = await trio.lowlevel.open_process([sys.executable, HELPER, path], stdout=-1)
    try:
        buffer = b""
        while len(acknowledged) < 400:
            chunk = await process.stdout.receive_some(65536)
            assert chunk, "the writer exited early"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                event_id, offset = line.decode().split()
                acknowledged[event_id] = int(offset)
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == -signal.SIGKILL

    async with cortexdb.open_engine("leveldb", path=path) as engine:
        for worker in range(4):
            await engine.flush(f"org:acme/user:u{worker}")
        found = {}
        for worker in range(4):
            cursor = None
            while True:
                page = await engine.events(f"org:acme/user:u{worker}", limit=1000, cursor=cursor)
                for event in page["items"]:
                    found[event["id"]] = event["wal_offset"]
                if not page["has_more"]:
                    break
                cursor = page["next_cursor"]
        missing = set(acknowledged) - set(found)
        assert not missing, f"{len(missing)} acknowledged events lost"
        assert all(found[e] == o for e, o in acknowledged.items())
        # every captured event, acknowledged or not, finishes its pipeline after the restart
        for event_id in found:
            view = await engine.memory_event(event_id)
            assert view["stages_completed"][:4] == [
                "captured",
                "extracted",
                "indexed",
                "consolidated",
            ], view
        # offsets keep growing after the restart
        result = await engine.experience(
            {"scope": "org:acme/user:u0", "modality": "conversation",
             "content": {"kind": "text", "text": "after"}, "context": {"observed_at": "2026-05-14T00:00:00Z"}},
            wait="captured",
        )  # fmt: skip
        assert result.wal_offset > max(found.values())
