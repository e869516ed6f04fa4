"""Large buffers stay out of glibc's heap arenas: the engine fixes malloc's mmap threshold
(``EngineConfig.malloc_mmap_threshold``; docs/decisions.md, "A fixed mmap threshold")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import trio

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine import context, memtrim

glibc = pytest.mark.skipif(memtrim._libc_mallopt() is None, reason="mallopt is glibc's; elsewhere nothing is set")

# In a fresh interpreter: free a 4 MiB block (glibc's dynamic threshold climbs past it), then ask
# for 256 KiB and report whether it was served by its own mapping (mallinfo2's hblks).
_PROBE = textwrap.dedent("""
    import ctypes, json, sys
    from cortexdb.engine import memtrim

    class Info(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    fixed = memtrim.fix_mmap_threshold(json.loads(sys.argv[1]))
    libc.free(libc.malloc(4 << 20))
    before = libc.mallinfo2().hblks
    block = libc.malloc(256 << 10)
    mapped = libc.mallinfo2().hblks - before
    libc.free(block)
    print(json.dumps({"fixed": fixed, "mapped": mapped}))
""")


def _probe(threshold, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"} | env
    root = os.path.dirname(os.path.dirname(os.path.abspath(cortexdb.__file__)))
    environment["PYTHONPATH"] = root + os.pathsep + environment.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _PROBE, repr(threshold).replace("None", "null")],
                         env=environment, capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


@glibc
def test_a_fixed_threshold_keeps_large_blocks_in_their_own_mappings():
    # glibc's default: once a 4 MiB block was freed, a 256 KiB one comes from the heap arena
    assert _probe(None) == {"fixed": False, "mapped": 0}
    # fixed at 64 KiB: it gets its own mapping, unmapped on free
    assert _probe(65536) == {"fixed": True, "mapped": 1}


@glibc
def test_the_operators_environment_variable_wins():
    assert _probe(65536, MALLOC_MMAP_THRESHOLD_="8388608") == {"fixed": False, "mapped": 0}


def test_out_of_range_thresholds_are_refused():
    for bad in (-1, 32 * 1024 * 1024 + 1):
        with pytest.raises(ValueError):
            EngineConfig(malloc_mmap_threshold=bad)
        with pytest.raises(ValueError):
            memtrim.fix_mmap_threshold(bad)


async def test_an_engine_sets_its_configured_threshold_when_it_opens(monkeypatch):
    calls = []
    monkeypatch.setattr(context, "fix_mmap_threshold", calls.append)
    async with cortexdb.open_engine("memory", config=EngineConfig(malloc_mmap_threshold=131072), id_seed=1):
        pass
    async with cortexdb.open_engine("memory", config=EngineConfig(malloc_mmap_threshold=None), id_seed=1):
        pass
    assert calls == [131072, None]


async def test_the_trim_timer_runs_every_memory_trim_interval(monkeypatch, autojump_clock):
    """Freed heap goes back to the system on its own timer (``memory_trim_interval``), not on
    the maintenance timer's 60 s (docs/decisions.md, "Trimming freed heap more often")."""
    for interval, expected in ((5.0, 5), (0.0, 0)):
        trims = []

        async def trim(trims: list = trims) -> bool:
            trims.append(trio.current_time())
            return True

        monkeypatch.setattr(context, "release_free_memory_soon", trim)
        config = EngineConfig(memory_trim_interval=interval, maintenance_interval=1e6)
        async with cortexdb.open_engine("memory", config=config, id_seed=1):
            started = trio.current_time()
            await trio.sleep(27)  # virtual time (autojump): the timer under test fires at 5, 10, ... 25 s
        assert len(trims) == expected
        assert [round(at - started) for at in trims] == [5, 10, 15, 20, 25][:expected]


def test_the_trim_interval_is_a_setting_with_a_default():
    from cortexdb.server.serve import config_of
    from cortexdb.server.settings import ServerSettings

    assert config_of(ServerSettings.from_env({})).memory_trim_interval == EngineConfig().memory_trim_interval
    assert config_of(ServerSettings.from_env({"CORTEX_MEMORY_TRIM_INTERVAL": "15"})).memory_trim_interval == 15.0
    with pytest.raises(ValueError, match="CORTEX_MEMORY_TRIM_INTERVAL must be a number"):
        ServerSettings.from_env({"CORTEX_MEMORY_TRIM_INTERVAL": "often"})
    with pytest.raises(ValueError, match="memory_trim_interval"):
        ServerSettings.from_env({"CORTEX_MEMORY_TRIM_INTERVAL": "-1"})
    with pytest.raises(ValueError, match="memory_trim_interval"):
        EngineConfig(memory_trim_interval=-1)
