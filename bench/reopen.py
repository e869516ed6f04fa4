"""Reopening a data dir: kept sealed vector and text segments mapped against a rebuild, in one run.

    python bench/reopen.py --data DIR [--trials 3] [--queries 20] [--work /tmp/reopen-bench]
                           [--vector-segment-size 20000] [--run-rows 2048] [--text-seal-docs 2048] [--base CODE]

``DIR`` is a loaded LevelDB data dir (bench/recall_ab.py's: hash embedder, scope
``org:bench/user:alice``); it is only read.  First a copy of it is opened once with kept segments
on (``vector_segments_kept``, the default) and settled: that open rebuilds what the copy has no
kept file for and keeps it (its time is printed: a one-time cost, the first open after an
upgrade).  Then, ``--trials`` times, two arms in alternating order, each in a fresh process on a
fresh copy of that prepared dir:

- ``kept``: the prepared copy as it is (the kept segments mapped and checked against the stored
  vectors);
- ``textoff``: the same copy with kept text segments off (``text_segments_kept``: every text
  re-tokenised into fresh BM25 layers, the vector segments still mapped: what an open did before
  text segments were kept);
- ``rebuild``: the same copy with ``vector-segments/`` and the kept text segments emptied and both
  settings off (every sealed segment built again from the stored vectors, then merged, the
  IVF k-means of a segment reaching ``vector_segment_size`` included, and every text tokenised);
- ``main`` (with ``--base CODE``, a checkout of another version, e.g. ``git archive`` of main):
  that version's code on the same copy (the kept text segments removed first: it has none).

Each child prints: the time to open the engine, to the scope restored (``flush``: its indexes
restored, what a recall then answers is the full answer), to the first recall answered after
that, to the background seals and merges finished (idle), its RSS after the restore and when
idle (and the peak, VmHWM), the CPU time, the k-means trainings and segment builds it ran, what
the text restore confirmed from kept slots and tokenised anew, and the top-10 event ids
of ``--queries`` recalls.  The parent prints the medians, each arm's ratio to ``kept``, whether the
arms answered the same ids, and the load average.  ``--vector-segment-size`` (every open,
the prepared one included): a smaller one puts IVF segments (k-means) in a smaller data dir, the
shape of a larger scope's at the default.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.environ.get("REOPEN_CODE") or os.path.join(_HERE, ".."))  # a child of ``--base``: that code
# arm: (vector segments kept, text segments kept, the code: None this checkout, else --base)
ARMS = {"kept": (True, True, None), "textoff": (True, False, None), "rebuild": (False, False, None),
        "main": (True, False, "base")}  # fmt: skip

SCOPE = "org:bench/user:alice"
QUERIES = ["Where does she live now?", "What does {name} do at {company}?", "Who likes {thing}?",
           "How many seats does {company} have?", "When is the trip to {place}?", "What hobby does {name} enjoy?"]  # fmt: skip
WORDS = {"name": ["Maria", "John", "Aiko", "Omar"], "company": ["Acme", "Globex", "Initech"],
         "thing": ["jazz", "chess", "tea"], "place": ["Lisbon", "Kyoto", "Lima"]}  # fmt: skip


def rss_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def queries(count: int) -> list[str]:
    rng = random.Random(7)
    return [rng.choice(QUERIES).format(**{k: rng.choice(v) for k, v in WORDS.items()}) for _ in range(count)]


def request(query: str) -> dict:
    return {"scope": SCOPE, "view": "granular", "traversal": "local", "query": query, "include": ["events"],
            "budgets": {"per_layer_limits": {"events": 10}}, "diagnostics": "none", "citation_mode": "none"}  # fmt: skip


async def child(path: str, kept: bool, count: int, segment_size: int, run_rows: int, text_kept: bool = True,
                seal_docs: int = 2048) -> dict:  # fmt: skip
    import attrs

    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.engine.retrieve import vector_ivf, vector_segments

    cpu, started = time.process_time(), time.perf_counter()
    text = {"text_segments_kept": text_kept} if "text_segments_kept" in attrs.fields_dict(EngineConfig) else {}
    config = EngineConfig(embedder="hash", idle_timeout=3600, vector_segments_kept=kept,
                          vector_segment_size=segment_size, vector_run_rows=run_rows, text_seal_docs=seal_docs, **text)  # fmt: skip
    out: dict = {}
    async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
        out["open_s"] = time.perf_counter() - started
        await engine.flush(SCOPE)
        out["restored_s"] = time.perf_counter() - started
        out["rss_restored_mb"] = rss_kb() / 1024
        first = await engine.recall(request(queries(1)[0]))
        out["first_recall_s"] = time.perf_counter() - started
        lane = engine._supervisor.actor(SCOPE).lane
        await lane.index.vector_job_finished()
        out["idle_s"] = time.perf_counter() - started
        out["rss_idle_mb"], out["hwm_mb"] = rss_kb() / 1024, rss_kb("VmHWM") / 1024
        out["cpu_s"] = time.process_time() - cpu
        out["trainings"], out["builds"] = vector_ivf.TRAININGS[0], vector_segments.BUILDS[0]
        out["reopened"] = lane.state.vector_index.reopened
        out["text"] = getattr(lane.state.text_index, "reopened", {})
        out["text_segments"] = {p: i.segment_sizes for p, i in lane.state.text_index._indexes.items()}
        out["segments"] = {p: i.segment_sizes for p, i in lane.state.vector_index._indexes.items()}
        out["first_ids"] = [item["id"] for item in first["layers"]["events"]]
        out["ids"] = [[item["id"] for item in (await engine.recall(request(q)))["layers"]["events"]] for q in queries(count)]
    return out


SEGMENT_SIZE = [20_000, 2048, 2048]  # --vector-segment-size, --run-rows and --text-seal-docs, for every child


BASE: list[str] = []  # --base


def run_child(path: str, arm: str, count: int) -> dict:
    kept, text_kept, code = ARMS[arm]
    env = {**os.environ, "REOPEN_CODE": BASE[0]} if code else {k: v for k, v in os.environ.items() if k != "REOPEN_CODE"}
    done = subprocess.run([sys.executable, __file__, "--child", path, "--kept", str(int(kept)), "--text-kept", str(int(text_kept)),
                           "--queries", str(count), "--vector-segment-size", str(SEGMENT_SIZE[0]), "--run-rows", str(SEGMENT_SIZE[1]),
                           "--text-seal-docs", str(SEGMENT_SIZE[2])], check=True, capture_output=True, text=True, env=env)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(source: str, work: str) -> tuple[str, dict]:
    prepared = os.path.join(work, "prepared")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, prepared)
    return prepared, run_child(prepared, "kept", 1)


def arm_copy(prepared: str, work: str, arm: str) -> str:
    path = os.path.join(work, arm)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(prepared, path)
    if arm == "rebuild":
        shutil.rmtree(os.path.join(path, "vector-segments"))
    if not ARMS[arm][1]:  # no kept text segments (an open with the setting off deletes them anyway)
        texts = os.path.join(path, "text-segments")
        for name in os.listdir(texts) if os.path.isdir(texts) else ():
            if os.path.isdir(os.path.join(texts, name)):
                shutil.rmtree(os.path.join(texts, name))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--work", default="/tmp/reopen-bench")
    parser.add_argument("--child")
    parser.add_argument("--kept", type=int, default=1)
    parser.add_argument("--text-kept", type=int, default=1)
    parser.add_argument("--base", help="a checkout of another version (main): its code is the arm 'main'")
    parser.add_argument("--vector-segment-size", type=int, default=20_000,
                        help="EngineConfig.vector_segment_size of every open (smaller: IVF k-means at a smaller scale)")
    parser.add_argument("--run-rows", type=int, default=2048, help="EngineConfig.vector_run_rows of every open")
    parser.add_argument("--text-seal-docs", type=int, default=2048, help="EngineConfig.text_seal_docs of every open")
    args = parser.parse_args()
    if args.child:
        import trio

        print(json.dumps(trio.run(child, args.child, bool(args.kept), args.queries, args.vector_segment_size, args.run_rows,
                                  bool(args.text_kept), args.text_seal_docs)))  # fmt: skip
        return
    SEGMENT_SIZE[:] = [args.vector_segment_size, args.run_rows, args.text_seal_docs]
    arms = ["kept", "textoff", "rebuild"]
    if args.base:
        BASE[:] = [os.path.abspath(args.base)]
        arms.append("main")
    prepared, first = prepare(args.data, args.work)
    print(f"prepare (first open, kept files written): restored {first['restored_s']:.1f} s, idle {first['idle_s']:.1f} s, "
          f"{first['trainings']} k-means, {first['builds']} builds | load {os.getloadavg()[0]:.2f}")  # fmt: skip
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    for trial in range(args.trials):
        for arm in arms if trial % 2 == 0 else arms[::-1]:  # alternating order
            result = run_child(arm_copy(prepared, args.work, arm), arm, args.queries)
            results[arm].append(result)
            print(f"trial {trial} {arm:8s} open {result['open_s']:.2f} s, restored {result['restored_s']:.2f} s, "
                  f"first recall {result['first_recall_s']:.2f} s, idle {result['idle_s']:.2f} s, cpu {result['cpu_s']:.1f} s, "
                  f"RSS restored {result['rss_restored_mb']:.0f} MB idle {result['rss_idle_mb']:.0f} MB (HWM {result['hwm_mb']:.0f}), "
                  f"{result['trainings']} k-means, {result['builds']} builds, reopened {result['reopened']}, text {result['text']} "
                  f"| load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    report(results)
    shutil.rmtree(args.work, ignore_errors=True)


def report(results: dict[str, list[dict]]) -> None:
    print(f"{'median':10s} {'restored s':>11s} {'1st recall s':>13s} {'idle s':>8s} {'cpu s':>7s} {'RSS MB':>7s} {'HWM MB':>7s}")
    medians = {}
    for arm, runs in results.items():
        medians[arm] = {k: statistics.median(r[k] for r in runs)
                        for k in ("restored_s", "first_recall_s", "idle_s", "cpu_s", "rss_restored_mb", "hwm_mb")}  # fmt: skip
        m = medians[arm]
        print(f"{arm:10s} {m['restored_s']:11.2f} {m['first_recall_s']:13.2f} {m['idle_s']:8.2f} {m['cpu_s']:7.1f} "
              f"{m['rss_restored_mb']:7.0f} {m['hwm_mb']:7.0f}")  # fmt: skip
    for arm in medians:
        if arm != "kept":
            ratio = {k: medians[arm][k] / max(medians["kept"][k], 1e-9) for k in medians["kept"]}
            print(f"{arm} / kept: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))
    kept = results["kept"][0]["ids"]
    for arm in medians:
        if arm == "kept":
            continue
        other = results[arm][0]["ids"]
        same = sum(a == b for a, b in zip(kept, other, strict=True))
        overlap = statistics.mean(len(set(a) & set(b)) / max(len(a), 1) for a, b in zip(kept, other, strict=True))
        print(f"answers kept vs {arm}: {same}/{len(kept)} top-10 lists identical, mean overlap {overlap:.3f}")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
