"""The benchmarks run (on a tiny slice) so they never rot.  No assertion is made on time."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_capture_benchmark_runs_and_prints_its_figures():
    result = subprocess.run(
        [sys.executable, "bench/capture.py", "--events", "300", "--trials", "1", "--derive-events", "200"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"raw plyvel WriteBatch puts: [\d,]+/s", out)
    for backend in ("memory", "leveldb"):
        assert re.search(
            rf"{backend}\s+wait omitted, keyed\s+:\s+[\d,]+ captures/s .* ratio to raw plyvel \d",
            out,
        )
        assert re.search(rf"{backend}\s+derivation \(backlog drain\):\s+[\d,]+ events/s", out)
        assert re.search(rf"{backend}\s+sustained capture\+derivation:\s+[\d,]+ events/s", out)
