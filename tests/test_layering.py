"""The layering of ``cortexdb``, written down and enforced (trio's test_exports habit).

The package is read with ``ast``, not imported (only the capability catalog is run, alone, for
its strings), so an import inside a function or under ``TYPE_CHECKING`` counts as much as a
top-level one.  Every module has one place in the map below (``test_every_module_has_a_place``),
and the ten rules of docs/architecture.md hold:

1. pure modules import only each other (``errors`` is one of them);
2. the stack points down: edge (server, http, client, cli, examples) → engine face → actors →
   storage/backends/testing; the pure modules stand beside it;
3. ``storage/keys`` is imported only by ``storage``; the KV SPI only by ``storage``, ``spi``,
   ``backends`` and ``testing``; ``actors`` only by the engine face;
4. the server sees only the engine's public face;
5. ``cortexdb/http`` imports nothing from ``cortexdb``; ``cortexdb/client`` imports neither the
   server nor the engine;
6. no import cycles;
7. no private attribute crosses a module (``x._name`` only where this module defines ``_name``);
8. the actors' message sets are closed: every message type has exactly one handler;
9. vocabulary has one home: error classes in ``errors.py``, capability strings in
   ``policy/capabilities.py``, stage words in ``stages.py``;
10. a size ratchet: a module ≤ 400 lines, a function ≤ 60 lines, except what
    ``tests/layering_allowlist.txt`` names with its current size — a list that may only shrink.
"""

from __future__ import annotations

import ast
import graphlib
import importlib.util
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cortexdb"
ALLOWLIST = Path(__file__).with_name("layering_allowlist.txt")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# -- the map -------------------------------------------------------------------------------------
# pure: records, decisions, indexes, protocols and leaf utilities; they hold no state of the
# engine's and import nothing stateful (the SPIs are Protocols; rule 3 keeps the KV one private)
PURE_PACKAGES = ("cortexdb.engine.model", "cortexdb.engine.derive", "cortexdb.engine.retrieve",
                 "cortexdb.engine.spi", "cortexdb.engine.policy")  # fmt: skip
LEAVES = {
    "cortexdb.errors", "cortexdb.schemas", "cortexdb.engine.stages", "cortexdb.engine.envelope",
    "cortexdb.engine.given_vector",
    "cortexdb.engine.config", "cortexdb.engine.clock", "cortexdb.engine.ids", "cortexdb.engine.scopes",
    "cortexdb.engine.temporal", "cortexdb.engine.timephrases", "cortexdb.engine.jsoncodec",
    "cortexdb.engine.cursor", "cortexdb.engine.limits", "cortexdb.engine.memtrim", "cortexdb.engine.durable",
}  # fmt: skip
# the engine face: the Engine and the modules it delegates to (the only importers of actors)
FACE_MODULES = {
    "cortexdb", "cortexdb.engine", "cortexdb.engine.engine", "cortexdb.engine.writes",
    "cortexdb.engine.reads", "cortexdb.engine.results", "cortexdb.engine.context",
    "cortexdb.engine.lifecycle", "cortexdb.engine.phrases", "cortexdb.engine.jobs", "cortexdb.engine.blobs",
    "cortexdb.engine.blob_holds", "cortexdb.engine.understanding", "cortexdb.engine.vocabularies",
    "cortexdb.engine.segmentation", "cortexdb.engine.signals", "cortexdb.engine.proposals",
    "cortexdb.engine.intake",
}  # fmt: skip
FACE_PACKAGES = ("cortexdb.engine.recall", "cortexdb.engine.forget", "cortexdb.engine.transfer")
# storage, and the adapters of other outside systems: the LLM providers (one speaks HTTP)
STORAGE = ("cortexdb.engine.storage", "cortexdb.backends", "cortexdb.testing", "cortexdb.engine.llm")
ACTORS = ("cortexdb.engine.actors",)
EDGE = ("cortexdb.server", "cortexdb.http", "cortexdb.client", "cortexdb.cli", "cortexdb.cli_store", "cortexdb.examples",
        "cortexdb.cli_transfer", "cortexdb.cli_export")
# rule 4: what the server may import of the engine — the Engine, its results, the records, the
# policy catalog, scopes, time, config, the stage words, the JSON codec and cursors, and the node
# tables it keeps its own stores in
SERVER_SEES = {
    "cortexdb", "cortexdb.errors", "cortexdb.schemas", "cortexdb.engine.engine",
    "cortexdb.engine.results", "cortexdb.engine.config", "cortexdb.engine.scopes",
    "cortexdb.engine.temporal", "cortexdb.engine.stages", "cortexdb.engine.jsoncodec",
    "cortexdb.engine.cursor", "cortexdb.engine.storage.node",
}  # fmt: skip
SERVER_SEES_PACKAGES = ("cortexdb.engine.model", "cortexdb.engine.policy", "cortexdb.server", "cortexdb.http")


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def is_pure(name: str) -> bool:
    return name in LEAVES or within(name, *PURE_PACKAGES)


def is_face(name: str) -> bool:
    return name in FACE_MODULES or within(name, *FACE_PACKAGES)


def level(name: str) -> int | None:
    """A module's height in the stack (higher imports lower, never the reverse); None if pure."""
    if is_pure(name):
        return None
    if is_face(name):
        return 3
    for height, prefixes in ((1, STORAGE), (2, ACTORS), (4, EDGE)):
        if within(name, *prefixes):
            return height
    raise LookupError(name)


# -- reading the package -------------------------------------------------------------------------
@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text(), str(modules()[name]))


def resolve(name: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = name.split(".") if modules()[name].name == "__init__.py" else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def imports(name: str) -> frozenset[str]:
    """Every cortexdb module ``name`` imports, anywhere in the file (``from p import m`` names
    module ``p.m`` when there is one, else ``p``)."""
    out: set[str] = set()
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            origin = resolve(name, node)
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules() else origin
                       for alias in node.names]  # fmt: skip
        else:
            continue
        for target in targets:
            while target and target not in modules():
                target = target.rpartition(".")[0]
            if target.startswith("cortexdb") and target != name:
                out.add(target)
    return frozenset(out)


def violations(check: Callable[[str, str], bool]) -> list[str]:
    return sorted(f"{name} -> {target}" for name in modules() for target in imports(name) if check(name, target))


def test_every_module_has_a_place():
    unplaced = []
    for name in modules():
        try:
            level(name)
        except LookupError:
            unplaced.append(name)
    assert unplaced == [], "add these to the map at the top of tests/test_layering.py"
    assert len(modules()) > 100  # the reader found the package


# -- rules 1-6: imports ----------------------------------------------------------------------------
def test_1_pure_modules_import_only_pure_modules():
    assert violations(lambda name, target: is_pure(name) and not is_pure(target)) == []


def test_2_the_stack_points_down():
    def upward(name: str, target: str) -> bool:
        mine, theirs = level(name), level(target)
        return mine is not None and theirs is not None and theirs > mine

    assert violations(upward) == []


def test_3_protected_modules():
    keys = violations(lambda n, t: t == "cortexdb.engine.storage.keys" and not within(n, "cortexdb.engine.storage"))
    kv = violations(lambda n, t: t == "cortexdb.engine.spi.kv" and not within(
        n, "cortexdb.engine.storage", "cortexdb.engine.spi", "cortexdb.backends", "cortexdb.testing"))  # fmt: skip
    actors = violations(lambda n, t: within(t, *ACTORS) and not (is_face(n) or within(n, *ACTORS)))
    assert (keys, kv, actors) == ([], [], [])


def test_4_the_server_sees_only_the_engine_face():
    def reaches_in(name: str, target: str) -> bool:
        return within(name, "cortexdb.server") and not (target in SERVER_SEES or within(target, *SERVER_SEES_PACKAGES))

    assert violations(reaches_in) == []


def test_5_http_and_client_stand_alone():
    http = violations(lambda n, t: within(n, "cortexdb.http") and not within(t, "cortexdb.http"))
    client = violations(lambda n, t: within(n, "cortexdb.client") and within(t, "cortexdb.server", "cortexdb.engine"))
    assert (http, client) == ([], [])


def test_6_no_import_cycles():
    graph = {name: imports(name) for name in modules()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        raise AssertionError(f"an import cycle: {' -> '.join(cycle.args[1])}") from None


# -- rule 7: privates --------------------------------------------------------------------------------
def members(name: str) -> set[str]:
    """The names a module defines: its functions and classes, the names bound at module level or
    in a class body (``__slots__`` entries too), and every attribute it assigns."""
    names: set[str] = set()
    module = tree(name)
    bodies = [module.body] + [node.body for node in ast.walk(module) if isinstance(node, ast.ClassDef)]
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    for statement in (s for body in bodies for s in body):
        targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name):
                names.add(target.id)
                if target.id == "__slots__" and isinstance(statement.value, ast.Tuple | ast.List):
                    names |= {e.value for e in statement.value.elts if isinstance(e, ast.Constant)}
    return names


def is_private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def test_7_no_private_attribute_crosses_a_module():
    """``x._name`` (``self`` and ``cls`` included: a base class in another module is another
    module) only where this module defines ``_name``; ``from m import _name`` never."""
    found = []
    for name in modules():
        mine = members(name)
        for node in ast.walk(tree(name)):
            if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in mine:
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom):
                found += [f"{name}:{node.lineno} imports {a.name}" for a in node.names if is_private(a.name)]
    assert found == []


# -- rule 8: the closed message sets ------------------------------------------------------------------
MESSAGES = "cortexdb.engine.actors.messages"
# the understanding's messages live beside it (messages.py lists them in its sets)
MESSAGE_MODULES = (MESSAGES, "cortexdb.engine.actors.concept_messages")
# the message sets of messages.py: each a tuple and the union that must name the same types
SETS = {"MESSAGE_TYPES": "Message", "QUERY_TYPES": "Query", "LANE_ITEM_TYPES": "LaneItem"}
# the classes of messages.py that are parts of messages, not messages
PARTS = {"ReplySlot", "CaptureItem"}
# handled by the mailbox loop itself, not by a table: ``Capture``s waiting together are
# group-committed as one write, and ``Stop`` ends the loop (ScopeActor._mailbox)
INLINE = {"Capture", "Stop"}


@cache
def message_sets() -> dict[str, list[str]]:
    """Each tuple and union of messages.py as type names (a starred tuple or a union inside one
    expanded to its members)."""
    values = {target.id: statement.value for statement in tree(MESSAGES).body if isinstance(statement, ast.Assign)
              for target in statement.targets if isinstance(target, ast.Name)}  # fmt: skip
    unions = {union: tuple_name for tuple_name, union in SETS.items()}

    def names(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Tuple):
            return [n for element in node.elts for n in names(element)]
        if isinstance(node, ast.Starred):
            return names(values[node.value.id])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return names(node.left) + names(node.right)
        if isinstance(node, ast.Name) and node.id in values and node.id in unions:
            return names(values[node.id])
        assert isinstance(node, ast.Name), ast.unparse(node)
        return [node.id]

    return {name: names(values[name]) for name in [*SETS, *SETS.values()]}


def comprehension_over(node: ast.AST) -> str | None:
    """The message set a ``{t: ... for t in SET}`` comprehension runs over, if it is one."""
    if isinstance(node, ast.DictComp) and isinstance(node.generators[0].iter, ast.Name):
        source = node.generators[0].iter.id
        return source if source in message_sets() else None
    return None


def handler_tables() -> list[tuple[str, list[str], list[str]]]:
    """Every dict display in the package keyed by message types, as (where, the types it names
    as keys, the sets it routes as a whole with ``**{t: ... for t in SET}``).  A comprehension
    over a set that is not so spread is a table naming every type of the set."""
    sets = message_sets()
    types = set(sets["MESSAGE_TYPES"]) | set(sets["LANE_ITEM_TYPES"])
    tables = []
    for name in modules():
        spread: set[int] = set()
        for node in ast.walk(tree(name)):
            if isinstance(node, ast.Dict):
                keys = [getattr(k, "id", getattr(k, "attr", None)) for k in node.keys if k is not None]
                spreads = [value for key, value in zip(node.keys, node.values, strict=True) if key is None]
                routes = [comprehension_over(value) for value in spreads if comprehension_over(value)]
                spread |= {id(value) for value in spreads}
                if routes or set(keys) & types:
                    tables.append((f"{name}:{node.lineno}", keys, routes))
        for node in ast.walk(tree(name)):
            if comprehension_over(node) and id(node) not in spread:
                tables.append((f"{name}:{node.lineno}", list(sets[comprehension_over(node)]), []))
    return tables


def test_8_each_message_set_is_one_tuple_and_its_union():
    sets = message_sets()
    for tuple_name, union in SETS.items():
        assert sorted(sets[tuple_name]) == sorted(sets[union]), (tuple_name, union)
        assert len(set(sets[tuple_name])) == len(sets[tuple_name]), tuple_name
    assert set(sets["QUERY_TYPES"]) < set(sets["MESSAGE_TYPES"])
    classes = {node.name for module in MESSAGE_MODULES for node in tree(module).body
               if isinstance(node, ast.ClassDef)}  # fmt: skip
    assert classes - PARTS == set(sets["MESSAGE_TYPES"]) | set(sets["LANE_ITEM_TYPES"]), \
        "every class of messages.py is a message, a lane item, or a part of one"  # fmt: skip


def test_8_every_message_type_has_exactly_one_handler():
    sets = message_sets()
    tables = handler_tables()
    handled = Counter(key for _, keys, _ in tables for key in keys) + Counter(INLINE)
    every = sets["MESSAGE_TYPES"] + sets["LANE_ITEM_TYPES"]
    assert {t: handled[t] for t in every if handled[t] != 1} == {}, "a message type with no handler, or two"
    assert [(where, keys) for where, keys, _ in tables if not set(keys) <= set(every)] == []
    # the mailbox routes every message: some by its table, the queries as a whole, two inline
    mailbox = [(keys, routes) for where, keys, routes in tables
               if where.startswith("cortexdb.engine.actors.scope_actor:")]  # fmt: skip
    assert len(mailbox) == 1
    keys, routes = mailbox[0]
    assert routes == ["QUERY_TYPES"]
    assert sorted(keys + sets["QUERY_TYPES"] + sorted(INLINE)) == sorted(sets["MESSAGE_TYPES"])
    inline = {node.args[1].id for node in ast.walk(tree("cortexdb.engine.actors.scope_actor"))
              if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
              and isinstance(node.args[1], ast.Name)}  # fmt: skip
    assert inline >= INLINE


# -- rule 9: vocabulary ------------------------------------------------------------------------------
def string_literals(name: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_9_error_classes_live_in_errors_py():
    errors = tree("cortexdb.errors")
    error_names = {node.name for node in errors.body if isinstance(node, ast.ClassDef)}
    assert "CortexError" in error_names
    found = []
    for name in modules():
        if name == "cortexdb.errors":
            continue
        for node in ast.walk(tree(name)):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & error_names:
                    found.append(f"{name}.{node.name}")
    assert found == []


def test_9_capability_strings_live_in_the_catalog():
    home = "cortexdb.engine.policy.capabilities"
    spec = importlib.util.spec_from_file_location("_capability_catalog", modules()[home])
    capabilities = importlib.util.module_from_spec(spec)  # the catalog alone, not the package
    spec.loader.exec_module(capabilities)
    prefixes = {capabilities.SCOPE_CREATE_PREFIX, capabilities.IMPORT_FROM_PREFIX, capabilities.EXPORT_FORMAT_PREFIX}
    catalog = set(capabilities.CAPABILITIES) | prefixes
    found = [f"{name}:{line} {text!r}" for name in modules() if name != home
             for line, text in string_literals(name) if text in catalog]  # fmt: skip
    assert found == []


# an embedding application's code speaks the API's words (``wait="consolidated"``): the example
# shipped with the package is such code, and docs/embedding.md shows it as written; so is the SDK,
# whose ``add`` waits until a write is searchable (``wait="indexed"``) and cannot import the engine
STAGE_WORDS_MAY_APPEAR = {"cortexdb.engine.stages", "cortexdb.examples.quickstart", "cortexdb.client._ops"}


def test_9_stage_words_live_in_stages_py():
    enum = next(node for node in tree("cortexdb.engine.stages").body if isinstance(node, ast.ClassDef))
    words = {statement.value.value for statement in enum.body if isinstance(statement, ast.Assign)}
    assert {"captured", "extracted", "indexed", "consolidated", "compressed"} <= words
    words.discard("episode")  # the internal step's word is an ordinary word elsewhere too
    found = [f"{name}:{line} {text!r}" for name in modules() if name not in STAGE_WORDS_MAY_APPEAR
             for line, text in string_literals(name) if text in words]  # fmt: skip
    assert found == []


# -- rule 10: the size ratchet -------------------------------------------------------------------------
def sizes() -> dict[str, int]:
    """Every module over MAX_MODULE_LINES and function over MAX_FUNCTION_LINES, with its lines."""
    found = {}
    for name, path in modules().items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found[f"module {name}"] = lines
        for qualname, node in functions(tree(name)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found[f"function {name}:{qualname}"] = length
    return found


def functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            qualname = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield qualname, child
            yield from functions(child, qualname + ".")
        else:
            yield from functions(child, prefix)


def allowlist() -> dict[str, int]:
    """``module NAME LINES`` or ``function NAME:QUALNAME LINES`` per line; ``#`` comments."""
    entries = {}
    for line in ALLOWLIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            what, lines = line.rsplit(" ", 1)
            assert what not in entries, f"{what} is listed twice"
            entries[what] = int(lines)
    return entries


def test_10_the_size_ratchet():
    found, allowed = sizes(), allowlist()
    over = {what: lines for what, lines in found.items() if what not in allowed}
    assert over == {}, f"over {MAX_MODULE_LINES} lines (a module) or {MAX_FUNCTION_LINES} (a function): split it"
    grew = {what: (allowed[what], lines) for what, lines in found.items() if lines > allowed.get(what, lines)}
    assert grew == {}, "an allowlisted module or function grew (listed, now): split it instead"
    stale = sorted(set(allowed) - set(found))
    assert stale == [], "no longer over the limit (or gone): remove from tests/layering_allowlist.txt"
    shrank = {what: lines for what, lines in found.items() if lines < allowed[what]}
    assert shrank == {}, "smaller now: write these sizes in tests/layering_allowlist.txt (it only shrinks)"
