"""The server's entry point under ``bench/soak.py --probe FILE``: a thread appends, every
``--sample-every`` seconds, where the server's memory is: resident memory by kind of mapping
(/proc/self/smaps), glibc's malloc counters (mallinfo2), pymalloc's block count, the sizes of the
engine's bounded caches, the Python object types whose count grew most since the last sample,
and the largest containers with the chain of holders from an object of ours (or a module, or a
frame) down to them.  The server's ``gc.freeze()`` is turned off: frozen objects are invisible to
``gc.get_referrers``.  A diagnostic: it pauses the server while it walks the heap, so a soak run
under it is for finding what grows, not for its latencies.

    python bench/soak_probe.py FILE EVERY serve ...   (the arguments of ``cortexdb serve``)
    SOAK_PROBE_BIGGEST=N   how many of the largest containers to name (15)
    SOAK_PROBE_COLLECT=1   a full collection at each sample, with what it freed
    SOAK_PROBE_HOLDERS=LifecycleEvent,CancelScope   name the holders of a few objects of these types
"""

import collections
import gc
import importlib.util
import os
import sys
import threading
import time

# bench/http.py would shadow the stdlib package `http`: keep this directory off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_spec = importlib.util.spec_from_file_location("procmem", os.path.join(_HERE, "procmem.py"))
procmem = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(procmem)
libc = procmem.glibc()


def mappings():
    kinds = collections.Counter()
    name, size = '', 0
    with open('/proc/self/smaps') as f:
        for line in f:
            head = line.split()
            if '-' in head[0] and len(head) >= 5:
                lo, hi = (int(x, 16) for x in head[0].split('-'))
                size = hi - lo
                path = head[5] if len(head) > 5 else ''
                if path == '[heap]':
                    name = 'heap'
                elif path.startswith('/'):
                    name = 'file:' + ('ldb' if path.endswith('.ldb') else path.rsplit('.', 1)[-1][:8] if '.' in path.rsplit('/', 1)[-1] else 'other')
                elif path:
                    name = path
                else:
                    name = 'anon<=1M' if size <= (1 << 20) + 8192 else 'anon>1M'
            elif head[0] == 'Rss:':
                kinds[name] += int(head[1])
    return kinds
def describe(obj):
    kind = type(obj).__name__
    if isinstance(obj, (list, tuple, dict)):
        kind += f'[{len(obj)}]'
    return kind
def hop(obj, limit=5000):
    """Breadth first over referrers from obj to the nearest holder that is an object of a class
    of ours or a module: (the holder, the path from it down to obj), or (None, path searched)."""
    import types
    skip = {id(sys._getframe())}
    parents = {id(obj): None}
    objects = {id(obj): obj}
    queue = collections.deque([obj])
    found = None
    while queue and len(parents) < limit and found is None:
        here = queue.popleft()
        for holder in gc.get_referrers(here):
            if id(holder) in parents or id(holder) in skip \
                    or holder is queue or holder is parents or holder is objects:
                continue
            parents[id(holder)] = id(here)
            objects[id(holder)] = holder
            if isinstance(holder, types.FrameType):
                if holder.f_code.co_filename == __file__:
                    continue
                found = holder
                break
            module = getattr(type(holder), '__module__', '') or ''
            if module.startswith(('cortexdb', 'trio', 'hypercorn', 'quart', 'plyvel')) or isinstance(holder, types.ModuleType):
                found = holder
                break
            queue.append(holder)
    if found is None:
        return None, [f'? ({len(parents)} searched)']
    names, node = [], parents[id(found)]
    while node is not None and node != id(obj):
        names.append(describe(objects[node]))
        node = parents[node]
    if isinstance(found, types.FrameType):
        name = f'frame {found.f_code.co_qualname} ({os.path.basename(found.f_code.co_filename)}:{found.f_lineno})'
    else:
        name = found.__name__ if isinstance(found, types.ModuleType) else type(found).__qualname__
    return found, [name] + names


def chain(obj, hops=4):
    import types
    out = [describe(obj)]
    for _ in range(hops):
        holder, path = hop(obj)
        out[:0] = path
        if holder is None or isinstance(holder, (types.ModuleType, types.FrameType)):
            break
        obj = holder
    return out


def deep(obj, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, type):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep(k, seen) + deep(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep(v, seen) for v in obj)
    elif hasattr(obj, '__dict__') or hasattr(type(obj), '__slots__'):
        for name in getattr(type(obj), '__slots__', ()) or ():
            size += deep(getattr(obj, name, None), seen)
        if hasattr(obj, '__dict__'):
            size += deep(obj.__dict__, seen)
    return size
def sampled(values, n=30):
    values = list(values)
    if not values:
        return 0.0
    step = max(1, len(values) // n)
    picked = values[::step][:n]
    return sum(deep(v) for v in picked) / len(picked) * len(values) / 1e6
def structures():
    parts = collections.defaultdict(int)
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name == 'PartitionState':
            parts['facts n'] += len(obj.facts)
            parts['facts MB'] += sampled(obj.facts.values())
            parts['beliefs n'] += len(obj.beliefs)
            parts['beliefs MB'] += sampled(v for v in obj.beliefs.values() if v is not None)
            parts['belief_by_id n'] += len(obj.belief_by_id)
            parts['queued events n'] += len(obj.events)
            parts['fact_ids n'] += len(obj.fact_ids)
            parts['text docs n'] += len(obj.text_index)
        elif name == 'DecodedEpisodes':
            parts['episode cache n'] += len(obj)
            parts['episode cache raw MB'] += obj.bytes / 1e6
            parts['episode cache decoded MB'] += sampled(v[1] for v in obj._items.values())
        elif name == 'PackCache':
            parts['packs n'] += len(obj._packs)
            parts['packs MB'] += sum(len(v[1]) if isinstance(v[1], bytes) else 0 for v in obj._packs.values()) / 1e6
        elif name == 'FrameCache':
            parts['frames n'] += len(obj._sse) + len(obj._ws)
    return ', '.join(f'{k} {v:.1f}' if isinstance(v, float) else f'{k} {v}' for k, v in sorted(parts.items(), key=str))
def heap_lines(previous):
    """What the heap walk finds, as text.  It runs with the GIL held throughout (``procmem.held``) and
    returns no object of the heap: only strings and the type counts."""
    lines = ['    structures: ' + structures() + '\n']
    counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
    if COLLECT:
        before = sys.getallocatedblocks()
        found = gc.collect()
        lines.append(f'    gc.collect(): {found} unreachable, pymalloc blocks {before} -> {sys.getallocatedblocks()}\n')
    if previous is not None:
        grown = (counts - previous).most_common(12)
        lines.append('    objects grown: ' + ', '.join(f'{k} +{v}' for k, v in grown) + f' (total {sum(counts.values())})\n')
    # who holds a few objects of the types that grow (SOAK_PROBE_HOLDERS=Type,Type)
    for kind in HOLDERS:
        found = [o for o in gc.get_objects() if type(o).__name__ == kind]
        for obj in found[:2] + found[len(found) // 2:len(found) // 2 + 1]:
            lines.append(f'    holder of a {kind} (of {len(found)}): ' + ' -> '.join(chain(obj, hops=3)) + '\n')
        del found
    # the largest containers (a growing one is what holds the growth) and who holds them
    sized = sorted(((len(o), o) for o in gc.get_objects()
                    if type(o) in (list, dict, set, collections.deque, collections.OrderedDict)),
                   key=lambda pair: pair[0], reverse=True)[:BIGGEST]
    for n, obj in sized:
        lines.append(f'    big {type(obj).__name__}[{n}]: ' + ' -> '.join(chain(obj, hops=2)) + '\n')
    return lines, counts


def watch():
    started = time.monotonic()
    previous = None
    while True:
        time.sleep(EVERY)
        stats = gc.get_stats()
        kinds = mappings()
        info = libc.mallinfo2()
        lines, previous = procmem.held(heap_lines, previous)
        with open(PATH, 'a') as out:
            out.write(f'--- t={time.monotonic() - started:.0f} s  rss by mapping (MB): '
                      + ', '.join(f'{k} {v / 1024:.1f}' for k, v in kinds.most_common(8)) + '\n')
            out.write(f'    malloc: arena {info.arena / 1e6:.1f} MB, in use {info.uordblks / 1e6:.1f}, '
                      f'free {info.fordblks / 1e6:.1f}, mmapped {info.hblkhd / 1e6:.1f} ({info.hblks} blocks); '
                      f'pymalloc blocks {sys.getallocatedblocks()}\n')
            out.write(f'    gc: collections per generation {[s["collections"] for s in stats]}, '
                      f'collected {[s["collected"] for s in stats]}, counts {gc.get_count()}\n')
            out.writelines(lines)


if __name__ == "__main__":  # not in the engine's worker processes (trio_parallel spawns them: they import this as __mp_main__)
    PATH, EVERY = sys.argv[1], float(sys.argv[2])
    BIGGEST = int(os.environ.get('SOAK_PROBE_BIGGEST', '15'))  # the largest containers named per sample
    COLLECT = os.environ.get('SOAK_PROBE_COLLECT') == '1'  # a full collection at every sample
    HOLDERS = [k for k in os.environ.get('SOAK_PROBE_HOLDERS', '').split(',') if k]  # types whose holders are named
    del sys.argv[1:3]
    # the server freezes its start-up objects (gc.freeze): frozen objects are invisible to
    # gc.get_referrers, so the holders of what grows could not be named
    gc.freeze = lambda: None
    threading.Thread(target=watch, daemon=True).start()
    sys.argv[0] = 'cortexdb'
    from cortexdb.cli import main  # noqa: E402 (after the probe is in place)

    sys.exit(main())
