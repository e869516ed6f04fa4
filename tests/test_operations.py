"""Operating CortexDB from the command line (issue 14): the Makefile's settings, the store
commands (inspect, rebuild, reembed), one-line errors, the request log, health and metrics."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("env, bind", [({}, "127.0.0.1:8077"), ({"CORTEX_BIND": "127.0.0.1:9123"}, "127.0.0.1:9123")])
def test_make_serve_takes_cortex_bind_from_the_environment(env, bind):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CORTEX_")}
    # -n prints the command without running it; STAMP= skips building the virtualenv
    out = subprocess.run(["make", "-n", "serve", "STAMP="], cwd=ROOT, env={**clean, **env},
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert f"--bind '{bind}'" in out and "--preset 'dev_local'" in out and "--data './data'" in out
