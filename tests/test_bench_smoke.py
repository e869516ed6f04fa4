"""The benchmarks run (on a tiny slice) so they never rot.  No assertion is made on time."""

import json
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


def test_locomo_benchmark_runs_on_a_slice():
    data = os.path.join(ROOT, "..", "shared", "bench-data", "locomo-dev.json")
    assert os.path.exists(data), "the LoCoMo dev split lives in ../shared/bench-data"
    result = subprocess.run(
        [sys.executable, "bench/locomo.py", "--samples", "1", "--questions", "12", "--embedder", "hash"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for arm in ("hybrid", "bm25", "vector"):
        assert f"[{arm}] evidence recall@k" in result.stdout
    assert re.search(r"1-4 \[\d+\]\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+", result.stdout)
    assert re.search(
        r"recall latency p50 [\d.]+ ms, p95 [\d.]+ ms; ingest [\d,.]+ turns/s", result.stdout
    )


def test_locomo_benchmark_runs_through_a_real_server_beside_the_bulk_path():
    """``--http``: the protocol through ``cortexdb serve`` with single writes, side by side."""
    result = subprocess.run(
        [sys.executable, "bench/locomo.py", "--samples", "1", "--questions", "8", "--turns", "60",
         "--embedder", "hash", "--arms", "hybrid", "--http", "--single"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for label in ("[hybrid]", "[hybrid, single]", "[hybrid, http]"):
        assert f"{label} evidence recall@k" in result.stdout
    assert re.search(r"1-4\s+[\d.]+\s+[\d.]+\s+[\d.]+\n", result.stdout)  # bulk, single, http
    assert "questions whose top-10 turns differ, bulk vs http: 0 of" in result.stdout


def test_locomo_vector_cache_reuses_vectors_and_set_changes_a_setting(tmp_path):
    """``--vector-cache``: a second run encodes (almost) nothing and recalls the same; ``--set``
    reaches EngineConfig (the quality adjustments off give other figures on this slice)."""
    cache = str(tmp_path / "vectors.npz")
    command = [sys.executable, "bench/locomo.py", "--samples", "1", "--questions", "30", "--turns", "120",
               "--embedder", "hash", "--arms", "hybrid", "--vector-cache", cache]  # fmt: skip
    runs = [subprocess.run(command + extra, capture_output=True, text=True, timeout=600, cwd=ROOT)
            for extra in ([], [], ["--set", "recall_speaker_weight=0", "--set", "recall_length_weight=0"])]  # fmt: skip
    for run in runs:
        assert run.returncode == 0, run.stderr
    encoded = [int(re.search(r"vector cache .*: (\d+) hits, (\d+) texts encoded", r.stdout)[2]) for r in runs]
    assert encoded[0] > 100 and encoded[1] <= 5  # the query texts of a new pack id, at most
    table = [re.search(r"1-4 \[\d+\].*", r.stdout)[0] for r in runs]
    assert table[0] == table[1]
    assert table[2] != table[0]


def test_locomo_evidence_cleaning_follows_the_protocol():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from locomo import clean_evidence, parse_session_date

    assert clean_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "", "garbage", "D1:3"]) == [
        "D8:6", "D9:17", "D11:26", "D30:5", "D1:3"]  # fmt: skip
    assert parse_session_date("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00+00:00"


def test_recall_ab_benchmark_loads_once_and_reopens(tmp_path):
    data, outs = str(tmp_path / "data"), []
    for run, shape in enumerate(("pack", "events", "events")):
        out, items = str(tmp_path / f"ranked{run}.json"), str(tmp_path / f"items{run}.json")
        result = subprocess.run(
            [sys.executable, "bench/recall_ab.py", "--data", data, "--events", "150", "--queries", "4",
             "--shape", shape, "--clock", "2026-11-28T03:00:00Z", "--out", out, "--out-items", items,
             *(["--phases"] if run == 0 else [])],
            capture_output=True, text=True, timeout=600, cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert ("loaded 150 events" in result.stdout) == (run == 0)
        assert re.search(rf"{shape}: wall p50 [\d.]+ ms p95 [\d.]+ ms \| CPU p50 [\d.]+ ms", result.stdout)
        assert ("candidates (scope actor)" in result.stdout) == (run == 0)  # --phases
        with open(out) as handle:
            outs.append(json.load(handle))
        with open(items) as handle:
            assert len(json.load(handle)) == 4
    assert len(outs[1]) == 4 and all(len(pack["events"]) <= 10 for pack in outs[1])
    assert outs[1] == outs[2]  # the same data, the same pinned clock: the same ranking


def test_recall_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/recall.py", "--events", "300", "--queries", "5", "--holistic-sizes", "300"],  # --events: --sizes
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"300 events, one scope: recall p50\s+[\d.]+ ms", result.stdout)
    assert re.search(r"300 events, one scope, second pass: recall p50\s+[\d.]+ ms", result.stdout)
    assert re.search(r"300 events, one scope, router: recall p50\s+[\d.]+ ms with .* without \(ratio [\d.]+", result.stdout)
    assert re.search(r"300 events, one scope, streaming: first event \(plan\) p50\s+[\d.]+ ms.*first event / whole pack [\d.]+",
                     result.stdout)  # fmt: skip
    assert re.search(r"300 events, holistic over 3 levels: recall p50\s+[\d.]+ ms", result.stdout)
    assert re.search(r"300 events, one scope, memory: RSS \d+ MB before the load, growth peak [+-]\d+ MB \(sampled: anonymous [+-]\d+ MB, file-backed [+-]\d+ MB\), "
                     r"steady [+-]\d+ MB \([+-]?[\d.]+ KB/event; anonymous [+-]\d+ MB, file-backed [+-]\d+ MB\)", result.stdout)  # fmt: skip


def test_http_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/http.py", "--writes", "100", "--recalls", "10", "--clients", "4", "--also-hypercorn"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"capture:\s+\d+ writes/s\s+p50 [\d.]+ ms\s+p99 [\d.]+ ms\s+sequential p50 [\d.]+ ms", out)
    assert re.search(r"capture throughput [\d.]+\s+sequential p50 x[\d.]+", out)
    assert re.search(r"bulk:\s+\d+ items/s", out)
    assert re.search(r"derivation caught up [\d.]+ s after the last write", out)
    assert re.search(r"hypercorn trio worker, same run:\s+\d+ writes/s", out)


def test_stall_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/stall.py", "--chars", "40000", "--clients", "2", "--baseline", "0.5"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for phase in ("before", "during"):
        assert re.search(rf"{phase}:\s+\d+ requests\s+p50\s+([\d.]+|nan) ms\s+p99\s+([\d.]+|nan) ms", out)
    assert re.search(r"consolidation: [\d.]+ s", out)
    assert "recall with a 500-token budget: planted sentence found (passage" in out


def test_soak_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/soak.py", "--duration", "5", "--writes-per-s", "10", "--recalls-per-s", "2",
         "--subscribers", "4", "--backend", "memory", "--sample-every", "2", "--drain", "30"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+\d+", out, re.M)  # an RSS sample row
    assert re.search(r"\s+behind$", out, re.M) and re.search(r"\s[\d.]+\s+-?\d+$", out, re.M)  # the backlog column
    assert re.search(r"RSS: [\d.]+ MB at t=\d+ s .* -> [\d.]+ MB at t=\d+ s: growth [+-][\d.]+ %", out)
    assert re.search(r"anonymous RSS \(RssAnon\): [\d.]+ MB at t=\d+ s -> [\d.]+ MB: growth [+-][\d.]+ %", out)
    assert re.search(r"writes:\s+\d+ acknowledged .* p50 [\d.]+ ms\s+p99 [\d.]+ ms", out)
    assert re.search(r"recalls: \d+ in \d+ s, errors 0, p50 [\d.]+ ms\s+p99 [\d.]+ ms", out)
    rows = re.findall(r"^\s+(\d)\s+(\(firehose\)|org:\S+)\s+(\d+)\s+(\d+)\s+(-?\d+)\s+(\d+)", out, re.M)
    assert len(rows) == 4 and all(int(expected) > 0 for _, _, expected, *_ in rows)
    assert re.search(r"lost in total: \d+; subscribers that got lagging: \d+; same ids as published: ", out)
    assert re.search(r"client CPU: [\d.]+ s over \d+ s", out)


def test_soak_probe_says_where_the_servers_memory_is(tmp_path):
    """bench/soak.py --probe: the server writes its memory by mapping, malloc's counters, the
    engine's bounded caches and the largest containers with their holders."""
    probe = tmp_path / "probe.txt"
    result = subprocess.run(
        [sys.executable, "bench/soak.py", "--duration", "5", "--writes-per-s", "10", "--recalls-per-s", "2",
         "--subscribers", "2", "--backend", "memory", "--sample-every", "2", "--drain", "30", "--probe", str(probe)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "SOAK_PROBE_BIGGEST": "3", "SOAK_PROBE_HOLDERS": "LifecycleEvent"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = probe.read_text()
    assert re.search(r"^--- t=\d+ s  rss by mapping \(MB\): \S+ [\d.]+", text, re.M)
    assert re.search(r"malloc: arena [\d.]+ MB, in use [\d.]+, free [\d.]+", text)
    assert re.search(r"structures: .*facts n \d+.*packs n \d+", text)
    assert re.search(r"objects grown: \w+ \+\d+", text)
    assert len(re.findall(r"^    big \w+\[\d+\]: ", text, re.M)) >= 3
    assert re.search(r"^    holder of a LifecycleEvent \(of \d+\): \S+", text, re.M)


def test_server_memory_measures_the_server_at_rest_between_phases():
    """bench/server_memory.py: after each phase the server is settled (every write seen
    consolidated), collected and trimmed, then measured; tracemalloc diffs follow the second."""
    result = subprocess.run(
        [sys.executable, "bench/server_memory.py", "--checkpoints", "40,80", "--writes-per-s", "20",
         "--subscribers", "3", "--tracemalloc", "2"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)", out, re.M)
    assert [int(r[0]) for r in rows] == [40, 80] and all(float(r[3]) > 0 for r in rows)
    assert re.search(r"^\s+[+-][\d.]+ MB\s+[+-]\d+ blocks \(now [\d.]+ MB\)", out, re.M)  # a traced site
    assert re.search(r"anonymous RSS from 40 to 80 writes: [\d.]+ -> [\d.]+ MB \([+-][\d.]+ %, -?[\d.]+ KB a write\)", out)
    assert "errors: 0; subscribers that got lagging: 0" in out


def test_forget_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/forget.py", "--sizes", "200", "--kept", "100", "--queries", "5"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"200 events: erasure completed in [\d.]+ s: [\d,]+ events/s \(200 deleted", out)
    assert re.search(r"200 events: phases enumerate [\d.]+ s, refcount [\d.]+ s, categorize [\d.]+ s, "
                     r"delete [\d.]+ s, demote [\d.]+ s", out)  # fmt: skip
    assert re.search(r"baseline [\d.]+ / [\d.]+ ms; right after [\d.]+ / [\d.]+ ms \(ratio [\d.]+\); "
                     r"after reopening [\d.]+ / [\d.]+ ms \(ratio [\d.]+\)", out)  # fmt: skip
    assert "records left {'events': 0, 'episodes': 0, 'facts': 0, 'beliefs': 0}" in out


def test_answer_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/answer.py", "--samples", "1", "--questions", "12", "--embedder", "hash"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"1-4 \[\d+\](\s+[\d.]+){5}", result.stdout)
    assert re.search(r"answer cites gold evidence \(via provenance\) [\d.]+% of \d+ questions", result.stdout)
    assert re.search(r"recall_ms: p50\s+[\d.]+ ms\s+p95\s+[\d.]+ ms", result.stdout)
    assert "answer model: extractive" in result.stdout


def test_import_benchmark_runs_on_a_slice():
    result = subprocess.run([sys.executable, "bench/import.py", "--items", "1200", "--small", "300"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"baseline bulk write .*:\s+[\d,]+ items/s \([\d,]+ per CPU-second\)\s+peak RSS 300: \d+ MB "
                     r"1,200: \d+ MB", result.stdout)  # fmt: skip
    for source in ("jsonl", "mem0"):
        for ordering in ("strict_temporal", "batch_throughput"):
            # baseline just before, the import, ratio, CPU ratio, load average, peak RSS by size
            assert re.search(rf"{source}\s+{ordering}\s+[\d,]+\s+[\d,]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+300: \d+ MB "
                             r"\([+-]\d+\)", result.stdout)  # fmt: skip
    assert re.search(r"baseline for mem0: .*: [\d,]+ items/s \([\d,]+ per CPU-second\), peak RSS \d+ MB", result.stdout)
    assert re.search(r"jsonl\s+strict_temporal\s+[\d,]+ records/s parsed\s+peak RSS 300: \d+ MB  1,200: \d+ MB",
                     result.stdout)  # fmt: skip


def test_versions_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/versions.py", "--events", "40", "--trials", "1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"derivation, one event per commit: [\d,]+ events/s", result.stdout)
    assert re.search(r"closed versions: [\d,]+ rows, [\d,]+ bytes = [\d.]+% of the derived tables", result.stdout)
    assert re.search(r"LevelDB table files once compacted: [\d,]+ bytes", result.stdout)


def test_capture_benchmark_runs_on_postgres_with_its_ratio_to_leveldb(live_pg_server):
    pg_server = live_pg_server
    result = subprocess.run(
        [sys.executable, "bench/capture.py", "--events", "100", "--trials", "1", "--derive-events", "50",
         "--backends", "leveldb,postgres", "--dsn", pg_server.dsn()],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"postgres\s+wait omitted, keyed\s+:\s+[\d,]+ captures/s .* ratio to leveldb \d", result.stdout)
    assert re.search(r"postgres\s+sustained capture\+derivation:\s+[\d,]+ events/s .* ratio to leveldb \d", result.stdout)


def test_context_document_benchmark_runs_on_a_slice():
    result = subprocess.run([sys.executable, "bench/context_document.py", "--events", "200", "--queries", "6"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for form in ("text", "xml"):
        assert re.search(rf"{form}: p50 [\d.]+ ms, p95 [\d.]+ ms, \d+ chars, [\d.]+ items kept", result.stdout)
    assert re.search(r"xml / text p50: [\d.]+x", result.stdout)


def test_signals_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/signals.py", "--events", "60", "--signals", "0,5", "--queries", "5"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"signals=\s+5\s+recall p50\s+[\d.]+ ms \(off:\s+[\d.]+\)\s+ratio\s+[\d.]+", result.stdout)
    assert re.search(r"record p50 [\d.]+ ms\s+snapshot .* p50 [\d.]+ ms", result.stdout)


def test_memprobe_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/memprobe.py", "--writes", "90", "--every", "30", "--tracemalloc"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"per write after 60: VmRSS -?[\d.]+ KB, anonymous -?[\d.]+ KB", result.stdout)
    assert len(re.findall(r"^\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+$", result.stdout, re.M)) == 3


def test_peers_benchmark_runs_on_a_slice_with_the_systems_installed_here():
    """CortexDB and the numpy baseline always run; Chroma and the bm25s hybrid only where their
    packages are installed (a separate venv, ``--peer-python``), else the output says they were
    skipped.  The rows are checked for shape and sanity, never for time."""
    import importlib.util

    result = subprocess.run(
        [sys.executable, "bench/peers.py", "--samples", "1", "--questions", "20", "--embedder", "hash"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    ran = ["cortexdb", "numpy"]
    for name, package in (("chroma", "chromadb"), ("hybrid", "bm25s")):
        if importlib.util.find_spec(package) is None:
            assert re.search(rf"^{name}: SKIPPED - {package} is not installed", out, re.M), out
        else:
            ran.append(name)
    header = next(line for line in out.splitlines() if line.startswith("| | "))
    assert [c.strip() for c in header.split("|")[2:-1]][: len(ran)] == [n for n in ("cortexdb", "chroma", "numpy", "hybrid") if n in ran]
    rows = {line.split("|")[1].strip(): [float(c.replace(",", "")) for c in line.split("|")[2 : 2 + len(ran)]]
            for line in out.splitlines() if line.startswith("| ") and not line.startswith("| | ")}  # fmt: skip
    for k in (5, 10, 20):
        values = rows[f"LoCoMo dev R@{k}, cats 1-4 [20]"]
        assert all(0 <= v <= 100 for v in values)
    assert all(a <= b for a, b in zip(rows["LoCoMo dev R@5, cats 1-4 [20]"], rows["LoCoMo dev R@20, cats 1-4 [20]"], strict=True))
    assert min(rows["LoCoMo dev R@10, cats 1-4 [20]"]) > 0  # every system finds some evidence
    for label in ("ingest turns/s, calls returned", "ingest turns/s, until idle", "query top-20 p50 ms",
                  "query top-20 p95 ms", "RSS before ingest, MB"):  # fmt: skip
        assert all(v > 0 for v in rows[label]), label
    for name, calls, idle in zip(ran, rows["ingest turns/s, calls returned"], rows["ingest turns/s, until idle"], strict=True):
        assert idle <= calls, name  # until idle includes the calls
    for p50, p95 in zip(rows["query top-20 p50 ms"], rows["query top-20 p95 ms"], strict=True):
        assert p50 <= p95
    assert re.search(r"419 items, 20 queries", out) and "load average at end" in out


def test_peers_benchmark_synthetic_scale_mode_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/peers.py", "--items", "300", "--queries", "10", "--embedder", "hash",
         "--systems", "cortexdb,numpy"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "synthetic, 300 items" in out and "300 items, 10 queries" in out
    overlap = next(line for line in out.splitlines() if line.startswith("| top-10 overlap with exact dense"))
    cortex, exact = (float(c) for c in overlap.split("|")[2:4])
    assert exact == 100.0 and 0 <= cortex <= 100  # numpy is the exact reference
    assert re.search(r"^\| ingest items/s, until idle \| [\d,.]+ \| [\d,.]+ \|$", out, re.M)
def test_scopes_benchmark_runs_on_a_slice():
    result = subprocess.run(
        [sys.executable, "bench/scopes.py", "--scopes", "4", "--events", "5", "--queries", "2", "--budget-mb", "1"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"^\s+open\s+[\d.]+\s+[+-][\d.]+", result.stdout, re.M)
    assert re.search(r"RSS growth under a 1 MB budget: [\d.-]+ MB against [\d.-]+ MB", result.stdout)
    assert re.search(r"estimate [\d.]+ MB for 4 open scopes", result.stdout)
    assert re.search(r"recall p50 reopening a released scope [\d.]+ ms against [\d.]+ ms open", result.stdout)


def test_derive_benchmark_runs_and_prints_cpu_per_event():
    """bench/derive.py: derivation CPU per event at two scope sizes (one arm: no baseline), and
    the bytes written per event by table (``--bytes``)."""
    result = subprocess.run(
        [sys.executable, "bench/derive.py", "--sizes", "100,300", "--batch", "100", "--bytes"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for size in (100, 300):
        assert re.search(rf"{size:>7} events held, load\s+[\d.]+: \| this:\s+[\d.]+ CPU ms/event", result.stdout)
    assert re.search(r"this: 400 events in all, [\d.]+ CPU ms/event, \d+ items/s until idle", result.stdout)
    assert len(re.findall(r"\([\s\d.]+ deriving, [\s\d.]+ event loop's thread\)", result.stdout)) == 2
    written = re.findall(r"this: ([\d.]+) KB written per event: .*\bX [\d.]+, .*LevelDB compactions in the batch",
                         result.stdout)  # fmt: skip
    assert len(written) == 2 and all(float(kb) > 1 for kb in written)


def test_derive_trickle_benchmark_runs_and_prints_cpu_and_bytes_per_event():
    """bench/derive_trickle.py: a commit per write, CPU and bytes per event (one arm)."""
    result = subprocess.run(
        [sys.executable, "bench/derive_trickle.py", "--warm", "20", "--timed", "20", "--rounds", "1", "--bytes"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = re.search(r"round 1, this: ([\d.]+) CPU ms/event \([\d.]+ event loop's thread\), load [\d.]+; "
                      r"([\d.]+) KB written/event: .*\bEP [\d.]+", result.stdout)  # fmt: skip
    assert found and float(found.group(1)) > 0 and float(found.group(2)) > 1


def test_engine_memory_bench_says_what_the_scopes_structures_account_for():
    result = subprocess.run(
        [sys.executable, "bench/engine_memory.py", "--checkpoints", "60,150", "--recall-every", "25",
         "--set", "pack_cache_max=1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^60 writes \(\d+ s, CPU \d+ s\): anonymous RSS [\d.]+ MB, scopes' structures [\d.]+ MB over 5 scopes", out, re.M)
    assert re.search(r"^150 writes .* over 5 scopes", out, re.M)
    assert re.search(r"heap: .*pymalloc blocks [\d,]+; LevelDB's estimate [\d.]+ MB; stem cache [\d,]+", out)
    assert re.search(r"split: pymalloc arenas [\d.]+ MB \([\d.]+ MB in live blocks, -?[\d.]+ MB free in them\); "
                     r"(glibc holds [\d.]+ MB .*; )?rest -?[\d.]+ MB", out)
    assert re.search(r"since 60: anonymous RSS -?[\d,]+ B a write, the scopes' structures -?[\d,]+ B a write", out)
    assert re.search(r"^    text_index\._indexes +[\d,]+ B a write", out, re.M)


def test_recall_memory_benchmark_splits_rss_by_mapping_and_its_arms_agree(tmp_path):
    data, outs = str(tmp_path / "data"), []
    for arm in ([], ["--copy", "--mmap-reads"]):
        out = str(tmp_path / f"packs{len(outs)}.json")
        result = subprocess.run(
            [sys.executable, "bench/recall_memory.py", "--data", data, "--events", "150", "--recalls", "4",
             "--every", "2", "--clock", "2026-11-28T03:00:00Z", "--out", out, *arm],
            capture_output=True, text=True, timeout=600, cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert len(re.findall(r"^\s+[24] recalls(\s+-?[\d.]+|\s+nan){13}\s+CPU p50", result.stdout, re.M)) == 2
        assert re.search(r"growth over the 1st recall: VmRSS [+-][\d.]+ MB \(anonymous", result.stdout)
        with open(out) as handle:
            outs.append(json.load(handle))
    assert ("mapped MB" in result.stdout) and len(outs[0]) == 4
    assert outs[0] == outs[1]  # LevelDB's reads through maps or pread: the same packs


def test_reopen_benchmark_maps_kept_segments_against_a_rebuild(tmp_path):
    data = str(tmp_path / "data")
    loaded = subprocess.run([sys.executable, "bench/recall_ab.py", "--data", data, "--events", "150", "--queries", "1"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    result = subprocess.run(
        [sys.executable, "bench/reopen.py", "--data", data, "--trials", "1", "--queries", "3", "--work", str(tmp_path / "work"),
         "--vector-segment-size", "64", "--run-rows", "16", "--text-seal-docs", "32"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    kept = re.search(r"trial 0 kept .* (\d+) k-means, (\d+) builds, reopened \{'segments': (\d+), 'refused': 0, 'revived': (\d+)", result.stdout)
    assert kept and kept.group(1) == kept.group(2) == "0" and int(kept.group(3)) > 0 and int(kept.group(4)) > 0, result.stdout
    text = re.search(r"trial 0 kept .* text \{'segments': (\d+), 'refused': 0, 'confirmed': (\d+)", result.stdout)
    assert text and int(text.group(1)) > 0 and int(text.group(2)) >= 128, result.stdout  # 4 seals of 32 kept
    assert re.search(r"rebuild / kept: restored_s [\d.]+x", result.stdout)
    assert re.search(r"textoff / kept: restored_s [\d.]+x", result.stdout)
    for arm in ("textoff", "rebuild"):
        assert f"answers kept vs {arm}: 3/3 top-10 lists identical" in result.stdout
