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


def test_no_merge_conflict_markers_are_left_in_the_docs_or_the_code():
    """A merge resolved by hand must not leave git's markers behind (session 35's review found
    some in docs/decisions.md) nor a blank line inside a Markdown table (which ends the table)."""
    marker = re.compile(r"^(<<<<<<< |>>>>>>> |=======$)", re.M)
    left = []
    for folder in ("docs", "cortexdb", "bench", "tests"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith((".md", ".py", ".yaml", ".json")):
                    path = os.path.join(base, name)
                    with open(path, encoding="utf-8") as handle:
                        if marker.search(handle.read()):
                            left.append(os.path.relpath(path, ROOT))
    assert left == []
    server = open(os.path.join(ROOT, "docs", "server.md"), encoding="utf-8").read().split("\n")
    split_rows = [n for n in range(1, len(server) - 1)
                  if server[n] == "" and server[n - 1].startswith("| |") and server[n + 1].startswith("| |")]  # fmt: skip
    assert split_rows == []
