"""LevelDB's table reads with ``pread`` instead of memory maps (docs/decisions.md, "LevelDB tables
read with pread").

LevelDB 1.22 maps up to 1,000 table files (``.ldb``) of a process into memory and reads their
blocks from the mapping.  Every block read faults in at least 64 KB of the file (the kernel's
fault-around, more where the page cache holds large folios), and the pages stay in the process's
resident set as long as the table is open: a big scope's recalls and every compaction's input
tables push RSS up by whatever part of the database they touched.  Beyond the limit LevelDB reads
with ``pread`` into its block cache (``lru_cache_size``), which bounds that memory.

The limit is a private variable of the library (``leveldb::g_mmap_limit``), read once, when the
process's default ``Env`` is made (at the first open of a DB); plyvel has no option for it.  This
module finds the variable through the symbol table of the very library file the process loaded
(the ``.symtab`` of plyvel's bundled ``libleveldb``), locates the library in memory through an
exported function's address, checks the variable still holds the library's default (1000), and
sets it to 0.  When anything does not match (another build, a stripped library, a system LevelDB,
no ``/proc``) it changes nothing and says so (``disable_mmap_reads`` returns why): reads keep
their memory maps, which is only a matter of memory, never of results.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading

DEFAULT_LIMIT = 1000  # LevelDB's kDefaultMmapLimit on 64-bit builds
LIMIT_SYMBOL = b"_ZN7leveldb12_GLOBAL__N_112g_mmap_limitE"
ANCHOR_SYMBOL = b"_ZN7leveldb3Env7DefaultEv"  # exported: where the library sits in memory

_lock = threading.Lock()
_state: str | None = None  # the outcome of the first call (it runs once per process)


def _symbols(path: str, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """The values (addresses relative to the load base) of ``names`` in the ELF64 little-endian
    file's ``.symtab`` and ``.dynsym``."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[bytes, int] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind not in (2, 11) or not entsize:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strings = sections[link]
        str_offset = strings[4]
        for start in range(offset, offset + size, entsize):
            st_name, _st_info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", data, start)
            if not st_name or not shndx:
                continue
            end = data.index(b"\0", str_offset + st_name)
            name = data[str_offset + st_name : end]
            if name in names:
                found[name] = value
    return found


def _library_path() -> str | None:
    """The libleveldb file mapped into this process (plyvel's, loaded with it)."""
    import plyvel  # noqa: F401  (loads the library)

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and "libleveldb" in parts[5]:
                    return parts[5].strip()
    except OSError:
        return None
    return None


def disable_mmap_reads() -> str:
    """Make LevelDB read tables with ``pread`` in this process (before its first DB opens);
    returns ``"pread"`` when done (or done before), else why not."""
    global _state
    with _lock:
        if _state is None:
            _state = _disable()
            if _state != "pread":
                logging.getLogger(__name__).info("LevelDB keeps reading tables through memory maps: %s", _state)
        return _state


def _disable() -> str:
    path = _library_path()
    if path is None:
        return "no libleveldb mapped in this process"
    try:
        symbols = _symbols(path, (LIMIT_SYMBOL, ANCHOR_SYMBOL))
    except (OSError, ValueError, struct.error, IndexError):
        return f"cannot read the symbols of {path}"
    if LIMIT_SYMBOL not in symbols or ANCHOR_SYMBOL not in symbols:
        return f"{path} has no {LIMIT_SYMBOL.decode()} symbol (stripped or another build)"
    try:
        library = ctypes.CDLL(path)
        anchor = ctypes.cast(getattr(library, ANCHOR_SYMBOL.decode()), ctypes.c_void_p).value
    except (OSError, AttributeError):
        return f"cannot locate {path} in memory"
    base = anchor - symbols[ANCHOR_SYMBOL]
    limit = ctypes.c_int.from_address(base + symbols[LIMIT_SYMBOL])
    if limit.value == 0:
        return "pread"
    if limit.value != DEFAULT_LIMIT:
        return f"unexpected mmap limit {limit.value} in {path}: left as it is"
    limit.value = 0
    return "pread"
