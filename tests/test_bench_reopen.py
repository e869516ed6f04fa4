"""bench/server_reopen.py runs (on a tiny slice), and the benches' server entry points do nothing
when a worker process imports them.  No assertion is made on time."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_server_reopen_measures_loaded_and_reopened_servers():
    """Each checkpoint's loaded server, then a fresh server on a copy of each dir, all measured
    settled, with the anonymous memory split by mapping."""
    result = subprocess.run(
        [sys.executable, "bench/server_reopen.py", "--checkpoints", "40,80", "--writes-per-s", "20",
         "--subscribers", "3", "--probe", "5"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rows = re.findall(r"^\s+(loaded|reopened) (\d+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert [(kind, int(n)) for kind, n, _, _ in rows] == [("loaded", 40), ("loaded", 80), ("reopened", 40), ("reopened", 80)]
    assert all(float(anon) > 0 for _, _, _, anon in rows)
    assert len(re.findall(r"anon by mapping MB: heap=[\d.]+\(\d+\) unnamed>=1MiB=[\d.]+", out)) == 4
    assert re.search(r"reopened servers' anonymous RSS from 40 to 80 writes: [\d.]+ -> [\d.]+ MB", out)


def test_server_entry_points_do_nothing_in_a_spawned_worker(tmp_path):
    """trio-parallel's workers (``derivation_workers = "process"``) import the program's main
    module as ``__mp_main__``; the entry points must not run the CLI there (they did: each worker
    exited with a usage error and the server's first use of one hung)."""
    for name in ("server_settle.py", "soak_probe.py"):
        code = ("import runpy, sys; sys.argv = ['x', sys.argv[1], '5', 'serve']; "
                f"runpy.run_path({os.path.join(ROOT, 'bench', name)!r}, run_name='__mp_main__'); print('imported')")  # fmt: skip
        result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.txt")],
                                capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.strip() == "imported"
        assert not (tmp_path / "out.txt").exists()
