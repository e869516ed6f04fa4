"""The server's entry point under ``bench/soak.py --probe FILE``: a thread appends, every
``--sample-every`` seconds, where the server's memory is: resident memory by kind of mapping
(/proc/self/smaps), glibc's malloc counters (mallinfo2), pymalloc's block count, the sizes of the
engine's bounded per-scope structures, the Python object types whose count grew most since the
last sample, and for a few containers made since then the chain of holders from an object of
ours down to them.  A diagnostic: it stops the server's threads while it walks the heap.

    python bench/soak_probe.py FILE EVERY serve ...   (the arguments of ``cortexdb serve``)
"""

import collections, ctypes, gc, os, sys, threading, time
# bench/http.py would shadow the stdlib package `http`: keep this directory off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks',
                                               'fsmblks', 'uordblks', 'fordblks', 'keepcost')]
libc = ctypes.CDLL('libc.so.6')
libc.mallinfo2.restype = MallInfo2
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
def watch():
    import random
    started = time.monotonic()
    previous, previous_ids, made_before = None, None, None
    while True:
        time.sleep(EVERY)
        stats = gc.get_stats()
        kinds = mappings()
        info = libc.mallinfo2()
        counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
        with open(PATH, 'a') as out:
            out.write(f'--- t={time.monotonic() - started:.0f} s  rss by mapping (MB): '
                      + ', '.join(f'{k} {v / 1024:.1f}' for k, v in kinds.most_common(8)) + '\n')
            out.write(f'    malloc: arena {info.arena / 1e6:.1f} MB, in use {info.uordblks / 1e6:.1f}, '
                      f'free {info.fordblks / 1e6:.1f}, mmapped {info.hblkhd / 1e6:.1f} ({info.hblks} blocks); '
                      f'pymalloc blocks {sys.getallocatedblocks()}\n')
            out.write('    structures: ' + structures() + '\n')
            # the lifecycle records alive, by age (their uuid7 ids carry the time) and stage
            now_ms = time.time() * 1000
            ages = collections.Counter()
            for o in gc.get_objects():
                if type(o).__name__ == 'LifecycleEvent':
                    born = int(o.lifecycle_id[4:12] + o.lifecycle_id[13:17], 16)
                    ages[(min(int((now_ms - born) / 60000), 9), o.stage)] += 1
            out.write('    lifecycle records alive by (minutes old, stage): ' + ', '.join(f'{k} {v}' for k, v in sorted(ages.items())) + '\n')
            old_one = None if not TREE else None
            for o in gc.get_objects():
                if type(o).__name__ == 'LifecycleEvent':
                    born = int(o.lifecycle_id[4:12] + o.lifecycle_id[13:17], 16)
                    if now_ms - born > 90000:
                        old_one = o
                        break
            if old_one is not None and TREE:
                level, seen = [old_one], {id(old_one)}
                out.write(f'    an old lifecycle record {old_one.stage} {old_one.lifecycle_id}, refcount {sys.getrefcount(old_one)}\n')
                for depth in range(6):
                    up = []
                    for thing in level:
                        for r in gc.get_referrers(thing):
                            if id(r) in seen or r is level or r is up or (type(r).__name__ == 'frame' and r.f_code.co_filename == __file__):
                                continue
                            seen.add(id(r))
                            up.append(r)
                            extra = ''
                            if isinstance(r, (list, tuple)):
                                extra = ' of ' + ','.join(type(x).__name__ for x in r[:5])
                            elif isinstance(r, dict):
                                extra = ' keys ' + ','.join(str(k)[:24] for k in list(r)[:5])
                            elif type(r).__name__ == 'frame':
                                extra = f' {r.f_code.co_qualname} {os.path.basename(r.f_code.co_filename)}:{r.f_lineno}'
                            out.write(f'      {"  " * depth}{describe(r)}{extra} (refcount {sys.getrefcount(r)})\n')
                    level = up[:8]
                    if not level:
                        break
                del level, up, old_one
            out.write(f'    gc: collections per generation {[s["collections"] for s in stats]}, '
                      f'collected {[s["collected"] for s in stats]}, counts {gc.get_count()}\n')
            if COLLECT:
                before = sys.getallocatedblocks()
                found = gc.collect()
                out.write(f'    gc.collect(): {found} unreachable, pymalloc blocks {before} -> {sys.getallocatedblocks()}; '
                          f'rss by mapping after: ' + ', '.join(f'{k} {v / 1024:.1f}' for k, v in mappings().most_common(3)) + '\n')
            if previous is not None:
                grown = (counts - previous).most_common(12)
                out.write('    objects grown: ' + ', '.join(f'{k} +{v}' for k, v in grown)
                          + f' (total {sum(counts.values())})\n')
            # the largest containers (a growing one is what holds the growth) and who holds them
            sized = sorted(((len(o), o) for o in gc.get_objects()
                            if type(o) in (list, dict, set, collections.deque, collections.OrderedDict)),
                           key=lambda pair: pair[0], reverse=True)[:BIGGEST]
            for n, obj in sized:
                out.write(f'    big {type(obj).__name__}[{n}]: ' + ' -> '.join(chain(obj, hops=2)) + '\n')
            del sized
            # survivors: containers made in the interval before last, still alive a whole interval
            # later (what is in flight now is not what grows)
            alive = [o for o in gc.get_objects() if type(o) in (list, dict, tuple, set) or type(o).__name__ == 'LifecycleEvent']
            if made_before is not None and SAMPLE:
                survivors = [o for o in alive if id(o) in made_before]
                out.write(f'    survivors of the interval before last: {len(survivors)}\n')
                events = [o for o in survivors if type(o).__name__ == 'LifecycleEvent']
                def tree(obj, depth, indent):
                    for r in gc.get_referrers(obj):
                        if r is survivors or r is events or r is alive or (isinstance(r, list) and len(r) > 100000) \
                                or type(r).__name__ == 'frame' and r.f_code.co_filename == __file__:
                            continue
                        extra = ''
                        if isinstance(r, (list, tuple)):
                            extra = ' of ' + ','.join(type(x).__name__ for x in r[:6])
                        elif isinstance(r, dict):
                            extra = ' keys ' + ','.join(str(k)[:20] for k in list(r)[:6])
                        elif type(r).__name__ == 'frame':
                            extra = f' {r.f_code.co_qualname} {os.path.basename(r.f_code.co_filename)}:{r.f_lineno}'
                        out.write(f'      {indent}{describe(r)}{extra}\n')
                        if depth:
                            tree(r, depth - 1, indent + '  ')
                if events:
                    out.write('    referrer tree of a surviving LifecycleEvent:\n')
                    tree(events[0], 4, '')
                for obj in events[:3]:
                    refs = [r for r in gc.get_referrers(obj) if r is not survivors and r is not events]
                    out.write(f'    a surviving LifecycleEvent {obj.stage} {obj.lifecycle_id}: refcount {sys.getrefcount(obj) - 3}, '
                              f'referrers {[describe(r) for r in refs]}\n')
                holders = collections.Counter()
                picked = random.Random(0).sample(survivors, min(SAMPLE, len(survivors)))
                for obj in picked:
                    holders[' -> '.join(chain(obj)[:4])] += 1
                for name, n in holders.most_common(12):
                    out.write(f'    held {n * 100 / max(1, len(picked)):4.0f} %: {name}\n')
            ids = {id(o) for o in alive}
            made_before = ids - previous_ids if previous_ids is not None else None
            previous_ids = ids
        previous = counts


PATH, EVERY = sys.argv[1], float(sys.argv[2])
SAMPLE = int(os.environ.get('SOAK_PROBE_SAMPLE', '0'))
BIGGEST = int(os.environ.get('SOAK_PROBE_BIGGEST', '15'))  # the largest containers named per sample
TREE = os.environ.get('SOAK_PROBE_TREE') == '1'  # the referrers of an old lifecycle record  # survivors traced to a holder per sample
COLLECT = os.environ.get('SOAK_PROBE_COLLECT') == '1'  # a full collection at every sample
del sys.argv[1:3]
# the server freezes its start-up objects (gc.freeze): frozen objects are invisible to
# gc.get_referrers, so the holders of what grows could not be named
gc.freeze = lambda: None
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = 'cortexdb'
from cortexdb.cli import main
sys.exit(main())
