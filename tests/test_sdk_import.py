"""``import cortexdb.client`` stays light: neither the engine, nor the server, nor Quart or Trio —
and the ``cortexdb`` package's engine names still load on first use (PEP 562)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A bare interpreter loads ~70 modules and httpx ~140 more; the SDK itself is a dozen.  (Before
# the split, ``import cortexdb.client`` loaded the engine and the server: 550+ modules.)
MODULE_BOUND = 280
# httpx imports its command-line client at import time when click, rich and pygments are all
# installed (rich comes with the dev extra's schemathesis): its weight, not the SDK's, so it is
# not counted
HTTPX_CLI = ("httpx._main", "click", "rich", "pygments")
HEAVY = ("cortexdb.engine", "cortexdb.server", "cortexdb.backends", "quart", "trio", "hypercorn", "numpy", "plyvel")


def run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env,
                          cwd=ROOT).stdout  # fmt: skip


def test_importing_the_sdk_loads_neither_engine_nor_server():
    out = json.loads(run("import cortexdb.client, json, sys; print(json.dumps(sorted(sys.modules)))"))
    heavy = [name for name in out if any(name == h or name.startswith(h + ".") for h in HEAVY)]
    assert heavy == []
    ours = [name for name in out if not any(name == h or name.startswith(h + ".") for h in HTTPX_CLI)]
    assert len(ours) < MODULE_BOUND, f"import cortexdb.client loaded {len(ours)} modules (httpx's CLI aside)"
    assert "cortexdb.client._transport" in out and "httpx" in out  # it did import the SDK


def test_the_package_top_level_is_lazy_and_still_complete():
    out = run("import cortexdb, sys; print('cortexdb.engine' in sys.modules);"
              "from cortexdb import EngineConfig, ManualClock, open_engine;"
              "print(EngineConfig.__module__, ManualClock.__module__, callable(open_engine));"
              "print(cortexdb.engine.__name__, 'Engine' in dir(cortexdb), cortexdb.PolicyDenied.error_code)")  # fmt: skip
    assert out.split("\n")[:3] == ["False", "cortexdb.engine.config cortexdb.engine.clock True",
                                   "cortexdb.engine True POLICY_DENIED"]  # fmt: skip
    missing = run("import cortexdb\ntry:\n    cortexdb.nonexistent\nexcept AttributeError as e:\n    print(e)")
    assert "has no attribute 'nonexistent'" in missing
