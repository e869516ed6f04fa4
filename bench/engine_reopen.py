"""A soak data dir reopened by the engine alone: settled memory, and what a recall costs, per variant.

    python bench/engine_reopen.py DIR_A DIR_B [DIR ...] [--variant NAME=JSON ...] [--runs 2]
                                  [--recalls 60] [--baseline TREE] [--heaptrack OUT]

Each DIR is a data dir of ``bench/server_reopen.py --keep`` (its ``copy-N``/``data``, N the writes
it holds, read from the dir's name when it ends in a number, else ``--writes``).  For each
variant and dir, ``--runs`` fresh child processes each copy the dir, open ``open_engine("leveldb")``
on the copy (the variant's LevelDB options and environment), make a write and a recall in each of
the soak's 5 user scopes (every scope opened, its indexes restored), flush, collect, trim
(``malloc_trim``) and read their memory: anonymous RSS, glibc's bytes in use and free, pymalloc's
arenas and live bytes, anonymous memory by mapping.  Then each times ``--recalls`` recalls (the
soak's queries, round robin over the scopes, one at a time): CPU time and wall time a recall.

A variant is ``NAME={"leveldb": {...plyvel options...}, "env": {...}, "config": {...}, "dirs": [...]}``:
the options go to ``LevelDBStore.open`` (on top of the store's defaults), the environment to the
child (``MALLOC_ARENA_MAX``...), the config to ``EngineConfig``; ``dirs``, the variant's own copies
of the DIRs, in their order (e.g. the same data rewritten with another ``block_size``).  ``--baseline TREE`` adds a variant
``base`` run from another checkout (PYTHONPATH=TREE), e.g. an archive of main.  The rows are the
median of the runs; the per-write column is the anonymous RSS between the first and the last
dir over the writes between them.  ``--heaptrack OUT`` runs each child under heaptrack (one run,
no timing) and leaves OUT-<variant>-<writes>.zst for ``heaptrack_print`` (``--diff``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIELDS = ("anon", "inuse", "free", "pyarenas", "pylive", "heap", "big", "small", "recall_cpu", "recall_ms")


CHILD = r"""
import gc, json, os, shutil, sys, time, importlib.util
import trio
here, src, variant = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
recalls, out = int(sys.argv[4]), sys.argv[5]
def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, name + ".py"))
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
procmem, soak, settle = load("procmem"), load("soak"), load("server_settle")
import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends.leveldb import LevelDBStore

async def main():
    tracker = None
    if os.environ.get("ENGINE_REOPEN_MEMRAY"):  # memray's tracker (another venv's python): live at the measure = leaked
        import memray
        tracker = memray.Tracker(os.environ["ENGINE_REOPEN_MEMRAY"], native_traces=True, follow_fork=False)
        tracker.__enter__()
    store = await LevelDBStore.open(src, **variant.get("leveldb", {}))
    config = EngineConfig(**variant.get("config", {}))
    async with cortexdb.open_engine("leveldb", config=config, store=store) as engine:
        for k in range(5):
            body = {**soak.write_body(1_000_000 + k, 5), "scope": soak.scope_of(k),
                    "idempotency_key": f"probe-{k}"}
            await engine.experience(body, caller=soak.ACTOR)
            await engine.recall({"scope": soak.scope_of(k), "query": soak.QUERIES[k]}, caller=soak.ACTOR)
        await engine.flush()
        gc.collect()
        libc = procmem.glibc()
        libc.malloc_trim(0)
        rss, info, pym = procmem.status(), libc.mallinfo2(), procmem.pymalloc()
        maps = settle.smaps_lines()[0]
        if os.environ.get("ENGINE_REOPEN_DUMP"):  # every anonymous mapping and glibc's malloc_info, for a closer look
            dump = os.environ["ENGINE_REOPEN_DUMP"]
            shutil.copyfile("/proc/self/smaps", dump + ".smaps")
            import ctypes
            libc_c = ctypes.CDLL("libc.so.6")
            fopen = libc_c.fopen; fopen.restype = ctypes.c_void_p; fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            handle = fopen((dump + ".malloc_info").encode(), b"w")
            libc_c.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
            libc_c.malloc_info(0, handle)
            libc_c.fclose.argtypes = [ctypes.c_void_p]
            libc_c.fclose(handle)
        found = dict(re.findall(r"(\w+[<>=]*\w*)=([0-9.]+)", maps))
        row = {"anon": rss["RssAnon"], "inuse": info.uordblks / 2**20, "free": info.fordblks / 2**20,
               "pyarenas": pym.get("arenas", 0), "pylive": pym.get("allocated", 0) / 2**20,
               "heap": float(found.get("heap", 0)), "big": float(found.get("unnamed>=1MiB", 0)),
               "small": float(found.get("unnamed<1MiB", 0))}
        if tracker is not None:
            tracker.__exit__(None, None, None)
        if not recalls:  # under heaptrack: what is live now is what it reports as leaked
            with open(out, "w") as f:
                json.dump(row, f)
            os._exit(0)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(recalls):
            k = i % 5
            await engine.recall({"scope": soak.scope_of(k), "query": soak.QUERIES[i % len(soak.QUERIES)]},
                                caller=soak.ACTOR)
        if recalls:
            row["recall_cpu"] = (time.process_time() - cpu) * 1000 / recalls
            row["recall_ms"] = (time.perf_counter() - wall) * 1000 / recalls
    with open(out, "w") as f:
        json.dump(row, f)

import re
trio.run(main)
"""


def data_of(path: str) -> str:
    return os.path.join(path, "data") if os.path.isdir(os.path.join(path, "data")) else path


def writes_of(path: str, default: int) -> int:
    found = re.search(r"(\d+)/?(data)?/?$", path)
    return int(found.group(1)) if found else default


def child(args: argparse.Namespace, tree: str, variant: dict, src: str, trace: str | None) -> dict:
    work = tempfile.mkdtemp(prefix="cortex-engine-reopen-", dir=args.tmp)
    try:
        copy = os.path.join(work, "data")
        shutil.copytree(src, copy)
        out = os.path.join(work, "row.json")
        env = {**os.environ, "PYTHONPATH": tree, **{k: str(v) for k, v in variant.get("env", {}).items()}}
        heaptrack = trace if trace and not args.memray else None
        if trace and args.memray:
            env["ENGINE_REOPEN_MEMRAY"] = trace + ".bin"
        variant = {k: v for k, v in variant.items() if k not in ("env", "dirs")}
        script = os.path.join(work, "child.py")  # a file, not -c: heaptrack records the command line
        with open(script, "w") as f:
            f.write(CHILD)
        cmd = [sys.executable, script, HERE, copy, json.dumps(variant), str(0 if trace else args.recalls), out]
        cmd[0] = args.python or cmd[0]
        if heaptrack:
            cmd = ["heaptrack", "-o", heaptrack, *cmd]
        subprocess.run(cmd, env=env, check=True, cwd=work, stdout=subprocess.DEVNULL if trace else None)
        with open(out) as f:
            return json.load(f)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_average() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON")
    parser.add_argument("--baseline", metavar="TREE", help="also run variant 'base' from this checkout")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--recalls", type=int, default=60)
    parser.add_argument("--writes", type=int, default=0, help="writes of a dir whose name gives none")
    parser.add_argument("--heaptrack", metavar="OUT")
    parser.add_argument("--memray", action="store_true", help="with --heaptrack OUT: memray's tracker instead (OUT-...bin)")
    parser.add_argument("--python", help="the children's interpreter (a venv with memray, for --memray)")
    parser.add_argument("--tmp", default=None, help="where the copies go (default: the system's)")
    args = parser.parse_args()
    variants: list[tuple[str, str, dict]] = []
    if args.baseline:
        variants.append(("base", os.path.abspath(args.baseline), {}))
    variants.append(("branch", ROOT, {}))
    for spec in args.variant:
        name, _, text = spec.partition("=")
        variants.append((name, ROOT, json.loads(text)))
    dirs = [(writes_of(d.rstrip("/"), args.writes), data_of(d)) for d in args.dirs]
    rows: dict[tuple[str, int], list[dict]] = {}
    runs = 1 if args.heaptrack else args.runs
    print(f"engine reopened: {len(dirs)} dirs, {len(variants)} variants, {runs} run(s) each, "
          f"{args.recalls if not args.heaptrack else 0} recalls timed; load {load_average():.1f}", flush=True)
    for run in range(runs):  # variants alternate within a run: the machine's load falls on all alike
        for name, tree, variant in variants:
            own = [data_of(d) for d in variant.get("dirs", [])]  # this variant's own copies of the dirs
            for i, (writes, src) in enumerate(dirs):
                src = own[i] if own else src
                trace = f"{args.heaptrack}-{name}-{writes}" if args.heaptrack else None
                row = child(args, tree, variant, src, trace)
                row["load"] = load_average()
                rows.setdefault((name, writes), []).append(row)
                print(f"  run {run + 1} {name:>12} {writes:6d}: " +
                      " ".join(f"{k}={row[k]:.1f}" for k in FIELDS if k in row) + f" load={row['load']:.1f}",
                      flush=True)  # fmt: skip
    print(f"\nmedians, MB (recall: ms a recall)  load {load_average():.1f}")
    print(f"{'variant':>12} {'writes':>6} " + " ".join(f"{k:>10}" for k in FIELDS) + f" {'KB/write':>9}")
    first = dirs[0][0]
    for name, _, _ in variants:
        for writes, _ in dirs:
            got = rows[(name, writes)]
            med = {k: statistics.median(r[k] for r in got) for k in FIELDS if k in got[0]}
            rows[(name, writes)] = [med]
            line = f"{name:>12} {writes:6d} " + " ".join(f"{med.get(k, float('nan')):10.2f}" for k in FIELDS)
            if writes != first:
                grown = med["anon"] - rows[(name, first)][0]["anon"]
                line += f" {grown * 1024 / (writes - first):9.3f}"
            print(line)
    ref = variants[0][0]
    print(f"\nratios to {ref}")
    for name, _, _ in variants[1:]:
        for writes, _ in dirs:
            a, b = rows[(ref, writes)][0], rows[(name, writes)][0]
            print(f"{name:>12} {writes:6d} " + " ".join(
                f"{k}={b[k] / a[k]:.3f}" for k in ("anon", "inuse", "recall_cpu", "recall_ms") if k in a and a[k]))


if __name__ == "__main__":
    main()
