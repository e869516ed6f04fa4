"""CPU of the lifecycle fan-out, without sockets: the bus's publish to many subscribers, and the
server's lifecycle streams (``server/streams.lifecycle_batches``: wake-ups, batching, the shared
tick) delivering to them, on the soak's shape (issue 10 part 8; docs/benchmarks.md).

    PYTHONPATH=$PWD python bench/fanout.py [--subscribers 50] [--records 20000] [--rounds 5]

Part 1 (``publish``): records committed 4 at a time (one write's stages) into a bus with the
soak's 50 subscribers (a third firehose, a third ``org:soak``, a third one of 5 user scopes),
taken in batches: CPU microseconds a record, the best of ``--rounds``.

Part 2 (``streams``): the same subscribers as server streams (``lifecycle_batches``, the SSE
and WebSocket feeds' loop) over an in-process engine, records published at 200/s of trio's
virtual clock (``MockClock(autojump_threshold=0)``: no real waiting); CPU a delivered record and a
batch, and records a batch.  The figures are for comparing two trees on the same machine, one
after the other (``PYTHONPATH=<tree>``); the soak gives the server's whole cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/http.py is named like the stdlib package: keep this directory off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))

import trio  # noqa: E402
import trio.testing  # noqa: E402

from cortexdb import ManualClock  # noqa: E402
from cortexdb.backends.memory.store import MemoryStore  # noqa: E402
from cortexdb.engine.actors.bus import LifecycleBus, LifecycleFilter  # noqa: E402
from cortexdb.engine.ids import IdGenerator  # noqa: E402
from cortexdb.engine.storage import NodeTables  # noqa: E402

SCOPES = [f"org:soak/user:u{k}" for k in range(5)]


def soak_filter(i: int) -> str | None:
    """The soak's subscriber ``i``: firehose, the org, or one user scope, in turn."""
    return [None, "org:soak", SCOPES[(i // 3) % 5]][i % 3]


async def publish_bench(subscribers: int, records: int, rounds: int) -> float:
    clock = ManualClock("2026-05-13T15:42:09Z")
    bus = LifecycleBus(NodeTables(MemoryStore()).lifecycle, IdGenerator(clock, seed=3), clock)
    subs = [await bus.subscribe(LifecycleFilter(scope=soak_filter(i)), capacity=10**7) for i in range(subscribers)]
    best = float("inf")
    for _ in range(rounds):
        batch = [bus.reserve("captured", scope=SCOPES[i % 5], event_id=f"evt_{i}") for i in range(records)]
        started = time.process_time()
        for i in range(0, records, 4):
            bus.commit(batch[i:i + 4])
            if i % 40 == 0:  # the streams take about every 10 records (a 50 ms tick at 200/s)
                for sub in subs:
                    sub.take()
        best = min(best, (time.process_time() - started) / records)
        for sub in subs:
            sub.take()
    return best * 1e6


async def streams_bench(subscribers: int, seconds: float) -> dict[str, float]:
    import cortexdb
    from cortexdb.server.app import create_app
    from cortexdb.server.call import RequestPolicyHook
    from cortexdb.server.policy import Principal
    from cortexdb.server.settings import ServerSettings
    from cortexdb.server.streams import lifecycle_batches

    clock = ManualClock("2026-05-13T15:42:09Z")
    async with cortexdb.open_engine("memory", clock=clock, id_seed=11, policy=RequestPolicyHook()) as engine:
        app = create_app(engine, ServerSettings(preset="dev_local"))
        state = app.cortex
        bus = engine._ctx.bus
        root = Principal(actor="user:root", tenant="acme", operator=True)
        delivered = [0, 0]  # records, batches

        async def follow(i: int) -> None:
            async for batch in lifecycle_batches(state, root, soak_filter(i), None, {}):
                if batch:
                    delivered[0] += len(batch)
                    delivered[1] += 1

        async with trio.open_nursery() as nursery:
            for i in range(subscribers):
                nursery.start_soon(follow, i)
            await trio.testing.wait_all_tasks_blocked()
            started, n = time.process_time(), 0
            until = trio.current_time() + seconds
            while trio.current_time() < until:  # one write's 4 records every 20 ms: 200 records/s
                records = [bus.reserve(stage, scope=SCOPES[n % 5], event_id=f"evt_{n}")
                           for stage in ("captured", "extracted", "indexed", "consolidated")]  # fmt: skip
                bus.commit(records)
                n += 1
                await trio.sleep(0.02)
            await trio.sleep(1.0)  # the last ticks
            cpu = time.process_time() - started
            state.closing.set()
        return {"records": delivered[0], "batches": delivered[1], "us_record": cpu / delivered[0] * 1e6,
                "us_batch": cpu / delivered[1] * 1e6, "per_batch": delivered[0] / delivered[1]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0, help="virtual seconds of publishing (part 2)")
    args = parser.parse_args()
    us = trio.run(publish_bench, args.subscribers, args.records, args.rounds)
    print(f"publish: {us:.2f} µs CPU a record to {args.subscribers} subscribers (best of {args.rounds})")
    clock = trio.testing.MockClock(autojump_threshold=0)
    got = trio.run(streams_bench, args.subscribers, args.seconds, clock=clock)
    print(f"streams: {got['records']} records in {got['batches']} batches ({got['per_batch']:.1f} a batch): "
          f"{got['us_record']:.2f} µs CPU a record, {got['us_batch']:.1f} µs a batch (publishing included)")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
