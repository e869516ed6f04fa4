"""Every example in README.md and docs/*.md runs as written (issue 15, item 17).

A fenced block in a language one runs — ``sh``/``bash`` (shell commands), ``console`` (a
transcript: its ``$`` lines are run and its output compared, ids and figures aside), ``python``
and ``http`` (``METHOD /path`` then a JSON body) — is executed here against a real server
(``cortexdb serve``, dev_local preset, memory backend, trusting a token issuer), from a
scratch directory where ``tests/`` is the repository's (the sample files the examples send).
The environment gives ``CORTEX`` / ``CORTEX_URL`` (the server) and ``T`` (a token for
``user:alice``).  A comment on the line before a block changes that:

- ``<!-- run: engine -->``: a fragment of an embedded program, run inside
  ``async with cortexdb.open_engine("memory") as engine:``;
- ``<!-- tested-by: tests/FILE.py::TEST -->``: a test of its own runs it (it must exist);
- ``<!-- not-run: REASON -->``: it cannot run here (another system, a server that runs until
  stopped); the reason is required and the list is kept short (``MAX_NOT_RUN``).

Blocks in other languages (``json``, ``text``, none) are shapes and outputs, not examples.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"sh", "bash", "console", "python", "http"}
MAX_NOT_RUN = 6
FENCE = re.compile(r"^(?:<!--\s*(?P<marker>[^\n]*?)\s*-->\n)?```(?P<lang>[A-Za-z]*)\n(?P<code>.*?)^```", re.S | re.M)
BIN = str(Path(sys.executable).parent)


def blocks():
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            if match["lang"] in RUNNABLE:
                line = text.count("\n", 0, match.start("lang")) + 1
                yield pytest.param(path.relative_to(ROOT).as_posix(), line, match["lang"], match["marker"] or "",
                                   match["code"], id=f"{path.name}:{line}")  # fmt: skip


BLOCKS = list(blocks())
RUN = [b for b in BLOCKS if not b.values[3].startswith(("not-run", "tested-by"))]  # the others are checked below


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory):
    """``cortexdb serve`` (dev_local, memory backend) trusting a fresh issuer; (url, env)."""
    home = tmp_path_factory.mktemp("docs")
    (home / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    cli = [sys.executable, "-m", "cortexdb.cli"]
    subprocess.run([*cli, "token", "keygen", "--dir", str(home / "issuer")], check=True, env=env,
                   capture_output=True)  # fmt: skip
    token = subprocess.run([*cli, "token", "mint", "--dir", str(home / "issuer"), "--sub", "user:alice",
                            "--tenant", "acme", "--ttl", "3600"], check=True, env=env, capture_output=True,
                           text=True).stdout.strip()  # fmt: skip
    process, url = start([*cli, "serve", "--preset", "dev_local", "--backend", "memory", "--tenant", "acme",
                          "--issuer-keys", str(home / "issuer"), "--embedder", "hash", "--bind", "127.0.0.1:0"],
                         env, home)  # fmt: skip
    try:
        yield url, home, {**env, "CORTEX": url, "CORTEX_URL": url, "T": token}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def start(command: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    for line in process.stderr:
        match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if match:
            return process, match.group(1)
    raise AssertionError("the server did not start: " + process.stderr.read())


def run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120,
        merge: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """``merge``: standard error into standard output, in the order written (as a terminal shows)."""
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                          text=True, env=env, cwd=cwd, timeout=timeout)  # fmt: skip


def test_every_runnable_block_is_run_or_says_why_not():
    not_run = [(doc, line, marker) for doc, line, _, marker, _ in (b.values for b in BLOCKS)
               if marker.startswith("not-run")]  # fmt: skip
    for doc, line, marker in not_run:
        assert len(marker.split(":", 1)[1].strip()) >= 20, f"{doc}:{line}: say why it cannot run"
    assert len(not_run) <= MAX_NOT_RUN, not_run
    for doc, line, _, marker, _ in (b.values for b in BLOCKS):
        if re.match(r"(not-run|tested-by|run)\b", marker):  # other comments are labels (<!-- walkthrough -->)
            assert re.match(r"(not-run: |tested-by: |run: engine$)", marker), f"{doc}:{line}: {marker}"
        if marker.startswith("tested-by:"):
            target = marker.split(":", 1)[1].strip()
            file, _, name = target.partition("::")
            assert f"def {name}(" in (ROOT / file).read_text(), f"{doc}:{line}: no test {target}"


MASK = [(re.compile(r"imp_[^\s:]*"), "imp_X"), (re.compile(r"\d[\d,.]*"), "N"), (re.compile(r"\s+"), " ")]


def masked(line: str) -> str:
    for pattern, replacement in MASK:
        line = pattern.sub(replacement, line)
    return line.strip()


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "line", "lang", "marker", "code"), RUN)
def test_example_runs(docs_server, doc, line, lang, marker, code):
    url, home, env = docs_server
    where = f"{doc}:{line}"
    if lang in ("sh", "bash"):
        result = run(["bash", "-euo", "pipefail", "-c", code], env, home)
        assert result.returncode == 0, f"{where}\n{result.stdout}\n{result.stderr}"
    elif lang == "console":
        commands = [ln[2:] for ln in code.splitlines() if ln.startswith("$ ")]
        expected = [masked(ln) for ln in code.splitlines() if not ln.startswith("$ ") and ln.strip()]
        scratch = home / f"console-{line}"  # its own directory: the transcript creates ./data
        scratch.mkdir()
        (scratch / "tests").symlink_to(ROOT / "tests")
        result = run(["bash", "-c", "\n".join(commands) + "\n"], {**env, "CORTEX_EMBEDDER": "hash"}, scratch,
                     merge=True)  # fmt: skip
        got = [masked(ln) for ln in result.stdout.splitlines() if ln.strip()]
        assert got == expected, f"{where}\n{result.stdout}\n{result.stderr}"
    elif lang == "python" and marker == "run: engine":
        body = "\n".join("        " + ln for ln in code.splitlines())
        program = ("import trio\nimport cortexdb\n\n\nasync def main():\n"
                   f"    async with cortexdb.open_engine('memory') as engine:\n{body}\n\n\ntrio.run(main)\n")  # fmt: skip
        result = run([sys.executable, "-c", program], env, home)
        assert result.returncode == 0, f"{where}\n{result.stderr}"
    elif lang == "python":
        result = run([sys.executable, "-c", code], env, home)
        assert result.returncode == 0, f"{where}\n{result.stderr}"
    else:  # http: the request line, then the JSON body
        request_line, _, body = code.partition("\n")
        method, path = request_line.split()
        response = httpx.request(method, url + path, json=json.loads(body) if body.strip() else None,
                                 headers={"X-Cortex-Actor": "user:alice"}, timeout=60)  # fmt: skip
        assert response.status_code < 300, f"{where}: {response.status_code} {response.text}"


@pytest.mark.slow
def test_server_md_token_and_sdk_example(tmp_path):
    """docs/server.md: the issuer, the token minted as written, the server it names, then the SDK
    example run with that token (it writes, recalls and follows the lifecycle)."""
    text = (ROOT / "docs" / "server.md").read_text()
    shell = re.search(r"      cortexdb token keygen.*?\n\n", text, re.S).group(0)
    commands = "\n".join(ln.strip() for ln in shell.splitlines())
    keygen_mint, serve_line = commands.split("\ncortexdb serve ")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    minted = run(["bash", "-euo", "pipefail", "-c", keygen_mint.replace("\\\n", " ") + '\necho "$CORTEX_TOKEN"'],
                 env, tmp_path)  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip().splitlines()[-1]
    process, url = start([sys.executable, "-m", "cortexdb.cli", "serve", *serve_line.split(), "--backend", "memory",
                          "--embedder", "hash", "--bind", "127.0.0.1:0"], env, tmp_path)  # fmt: skip
    try:
        example = re.search(r"## Python SDK\n\n.*?```python\n(.*?)```", text, re.S).group(1)
        result = run([sys.executable, "-c", example], {**env, "CORTEX_TOKEN": token, "CORTEX_URL": url}, tmp_path)
        assert result.returncode == 0, result.stderr
        assert "captured" in result.stdout and "Acme" in result.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
