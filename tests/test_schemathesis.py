"""Schemathesis over the OpenAPI document (issue 15, item 18): every operation the document
declares is called with generated requests — valid ones and invalid ones (negative mode) — and
no answer is a server error.  A bounded number of examples per operation keeps it in CI.

The server is the real one (the built-in HTTP server on loopback, memory backend, injected
clock, seeded ids), in a thread of this process; the dev_local preset (``X-Cortex-Actor``
authenticates) with the experimental surfaces enabled, so every operation is reached past
authentication and the stability gate.
"""

from __future__ import annotations

import queue
import threading

import pytest
import schemathesis
import trio
from hypothesis import HealthCheck, settings
from schemathesis.generation import GenerationMode

from cortexdb import EngineConfig, ManualClock
from cortexdb.server.openapi import document
from cortexdb.server.routes import declared
from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings
from tests.server_support import START, TENANT

EXAMPLES = 25  # generated requests per operation, valid and invalid ones together
ACTOR = {"X-Cortex-Actor": "user:alice"}

schema = schemathesis.openapi.from_dict(document(declared()))
# the fuzzing phase only (and the document's own examples): the coverage phase's boundary cases
# are not bounded by max_examples (hundreds per operation), and CI time is
schema.config.phases.update(phases=["examples", "fuzzing"])
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                max_examples=EXAMPLES, deterministic=True,
                                with_security_parameters=False)  # fmt: skip


@pytest.fixture(scope="module")
def base_url():
    """The built-in server on 127.0.0.1 in a thread with its own Trio loop, stopped at the end."""
    ready: queue.Queue = queue.Queue()
    stop: dict = {}

    async def main() -> None:
        stopped = trio.Event()
        stop["event"], stop["token"] = stopped, trio.lowlevel.current_trio_token()
        settings_ = ServerSettings(preset="dev_local", backend="memory", tenant=TENANT, bind="127.0.0.1:0",
                                   enable_experimental=True, access_log=False, stream_keepalive=60.0)  # fmt: skip
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: run_server(
                settings_, shutdown_trigger=stopped.wait, clock=ManualClock(START), id_seed=15,
                engine_config=EngineConfig(episode_idle_check=3600.0), task_status=task_status))  # fmt: skip
            ready.put(binds[0])

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    url = ready.get(timeout=60)
    yield url
    trio.from_thread.run_sync(stop["event"].set, trio_token=stop["token"])
    thread.join(timeout=60)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
def test_no_operation_answers_a_server_error(case, base_url):
    # a live Server-Sent Events feed never ends: schemathesis reads it for the timeout, at most
    streams = case.operation.path == "/v1/lifecycle/stream"
    response = case.call(base_url=base_url, headers=ACTOR, timeout=0.5 if streams else 30)
    declared = case.operation.definition.raw["responses"]  # a 501 only where the route says so
    assert response.status_code < 500 or str(response.status_code) in declared, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}\n"
        f"reproduce: {case.as_curl_command(headers=ACTOR)}")  # fmt: skip


def test_schemathesis_loads_every_operation():
    """No operation is skipped: each loads (its references resolve, its parameters and body have
    schemas schemathesis can generate from), and they are all the document's."""
    loaded = [result.ok() for result in schema.get_all_operations()]  # raises on an operation that fails to load
    documented = {(m.upper(), p) for p, ops in schema.raw_schema["paths"].items() for m in ops}
    assert {(op.method.upper(), op.path) for op in loaded} == documented
    assert len(loaded) == len(documented) == len(declared())
