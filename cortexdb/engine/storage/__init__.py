"""The storage layer: THE mapper between records and the KVStore (DESIGN §1, §4).

``keys`` (the key format) and the KVStore SPI are imported here and nowhere else in the engine or
the server: everything above works with ``Table`` objects — per-scope tables (``Partition``) and
node/tenant tables (``NodeTables``, which the engine exposes as ``Engine.tables``) — and commits
their operations (``Op``) in atomic writes.
"""

from .node import NodeTables, PepperTable, WalTable
from .partition import Partition
from .table import CHUNK_OPS, Key, Op, Table

__all__ = ["CHUNK_OPS", "Key", "NodeTables", "Op", "Partition", "PepperTable", "Table", "WalTable"]
