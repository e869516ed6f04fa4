"""Blob uploads through ``cortexdb serve``: throughput, and how much of an upload the server holds
in memory (its peak RSS before and after, read from /proc), on both HTTP servers.

The server streams an upload to a staging file as it arrives (docs/blobs.md), so its peak RSS
should grow by a small fraction of the upload; the figure printed beside each growth is that
fraction.  A raw upload, a multipart upload and a download of the same bytes are timed.

    python bench/blobs.py [--mb 100] [--servers cortex,hypercorn]
"""

from __future__ import annotations

import os
import sys
import threading

# bench/http.py is named like the stdlib package `http`: drop this directory from the import path
# before httpx imports `http.client`
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import hashlib  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTOR = {"X-Cortex-Actor": "user:alice"}
SCOPE = "org:acme/user:alice"


def start(data: str, http_server: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": ROOT}
    process = subprocess.Popen([sys.executable, "-m", "cortexdb.cli", "serve", "--data", data, "--bind", "127.0.0.1:0",
                                "--preset", "dev_local", "--embedder", "hash", "--http-server", http_server],
                               stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)  # fmt: skip
    for line in process.stderr:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if found:  # then keep draining its log (access lines): a full pipe would block the server
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    raise SystemExit("the server did not start")


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(http_server: str, path: str, size: int) -> None:
    with tempfile.TemporaryDirectory() as data:
        process, url = start(os.path.join(data, "data"), http_server)
        try:
            client = httpx.Client(base_url=url, headers=ACTOR, timeout=600)
            before = peak_rss_mb(process.pid)
            started = time.perf_counter()
            with open(path, "rb") as body:
                raw = client.post(f"/v1/blobs?scope={SCOPE}&filename=raw.bin", content=body,
                                  headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})  # fmt: skip
            raw_s = time.perf_counter() - started
            after_raw = peak_rss_mb(process.pid)
            started = time.perf_counter()
            with open(path, "rb") as body:
                form = client.post(f"/v1/blobs?scope={SCOPE}", files={"file": ("form.bin", body, "video/mp4")})
            form_s = time.perf_counter() - started
            after_form = peak_rss_mb(process.pid)
            blob_id = raw.json()["blob_id"]
            started = time.perf_counter()
            digest = hashlib.sha256()
            with client.stream("GET", f"/v1/blobs/{blob_id}") as response:
                for chunk in response.iter_bytes():
                    digest.update(chunk)
            get_s = time.perf_counter() - started
            after_get = peak_rss_mb(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    mb = size / 1e6
    assert raw.status_code == 201 and form.status_code == 201, (raw.text, form.text)
    assert digest.hexdigest() == raw.json()["sha256"] == form.json()["sha256"]
    print(f"{http_server:9s} peak RSS before: {before:.1f} MB")
    for name, seconds, peak, previous in (("raw upload", raw_s, after_raw, before),
                                          ("multipart upload", form_s, after_form, after_raw),
                                          ("download", get_s, after_get, after_form)):  # fmt: skip
        growth = peak - previous
        print(f"{http_server:9s} {name:17s} {mb:.0f} MB: {mb / seconds:7.1f} MB/s   peak RSS growth "
              f"{growth:+6.1f} MB  ({growth / mb:.3f} of the blob)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="blob size in MB (default 100)")
    parser.add_argument("--servers", default="cortex,hypercorn")
    args = parser.parse_args()
    size = args.mb * 1_000_000
    with tempfile.NamedTemporaryFile() as blob:
        for _ in range(size // 1_000_000):
            blob.write(os.urandom(1_000_000))
        blob.write(os.urandom(size % 1_000_000))
        blob.flush()
        for http_server in args.servers.split(","):
            run(http_server, blob.name, size)


if __name__ == "__main__":
    main()
