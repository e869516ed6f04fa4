"""bench/locomo_ab.py runs on a tiny slice (it never rots): recall settings side by side over one
ingest.  No assertion is made on time."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_locomo_ab_compares_variants_over_one_ingest():
    data = os.path.join(ROOT, "..", "shared", "bench-data", "locomo-dev.json")
    assert os.path.exists(data), "the LoCoMo dev split lives in ../shared/bench-data"
    result = subprocess.run(
        [sys.executable, "bench/locomo_ab.py", "--samples", "1", "--questions", "10", "--embedder", "hash",
         "--variant", "off:recall_feedback_docs=0", "--variant", "on:recall_feedback_docs=3"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"\s+off\s+on\n", out)  # one column per variant
    assert re.search(r"1-4(\s+[\d.]+ / [\d.]+ / [\d.]+){2}\n", out)
    assert re.search(r"conv-26\s+[\d.]+\s+[\d.]+\n", out)
    assert re.search(r"on\s+[\d.]+\s+[\d.]+\s+[\d.]+\n", out)  # CPU ms and its ratio
    bad = subprocess.run([sys.executable, "bench/locomo_ab.py", "--samples", "1", "--variant", "x:no_such_field=1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert bad.returncode != 0  # a misspelt setting fails before the ingest
