"""The documentation's examples run as written."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_embedding_example_runs_and_prints_what_the_doc_says(tmp_path):
    text = open(os.path.join(ROOT, "docs", "embedding.md")).read()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    expected = re.search(r"What it prints.*?```\n(.*?)```", text, re.S).group(1)
    result = subprocess.run(
        # its temporary data dir under tmp_path, not left in the machine's /tmp
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    ids = re.compile(r"(fact|belief|ep|evt)_[0-9a-f-]{36}")
    got = [ids.sub(r"\1_…", line) for line in result.stdout.splitlines()]
    want = expected.splitlines()
    assert got == want


def test_the_shipped_quickstart_is_the_documented_example():
    text = open(os.path.join(ROOT, "docs", "embedding.md")).read()
    documented = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shipped = open(os.path.join(ROOT, "cortexdb", "examples", "quickstart.py")).read()
    body = documented.split("async def main", 1)[1].split("trio.run(", 1)[0]
    assert body in shipped
