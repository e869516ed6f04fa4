"""CortexDB: a memory database for AI agents.

The embedding face::

    async with cortexdb.open_engine("leveldb", path="./data") as engine:
        result = await engine.experience(envelope, caller="user:alice", wait="consolidated")

The HTTP face is the SDK, ``cortexdb.client`` (docs/sdk.md).

The engine's names are loaded on first use (PEP 562): ``import cortexdb.client`` must not load
the engine (tests/test_sdk_import.py), and ``import cortexdb`` alone stays cheap.  The error
classes are plain (``errors`` imports nothing of the engine) and load at once.
"""

import importlib
import typing

from .errors import CortexError as CortexError
from .errors import DataDirLocked as DataDirLocked
from .errors import IdempotencyConflict as IdempotencyConflict
from .errors import Internal as Internal
from .errors import InvalidEnvelope as InvalidEnvelope
from .errors import InvalidScopeGrammar as InvalidScopeGrammar
from .errors import NotFound as NotFound
from .errors import PayloadTooLarge as PayloadTooLarge
from .errors import PolicyDenied as PolicyDenied
from .errors import ResourceDeleted as ResourceDeleted

if typing.TYPE_CHECKING:  # what the lazy names are, for type checkers and readers (and the layering test)
    from .engine.actors.bus import LifecycleFilter as LifecycleFilter
    from .engine.actors.bus import Subscription as Subscription
    from .engine.actors.supervisor import ActorStatistics as ActorStatistics
    from .engine.actors.supervisor import SupervisorStatistics as SupervisorStatistics
    from .engine.clock import Clock as Clock
    from .engine.clock import ManualClock as ManualClock
    from .engine.clock import SystemClock as SystemClock
    from .engine.config import EngineConfig as EngineConfig
    from .engine.engine import Engine as Engine
    from .engine.engine import open_engine as open_engine
    from .engine.model import LifecycleEvent as LifecycleEvent
    from .engine.policy import AllowAll as AllowAll
    from .engine.policy import PolicyHook as PolicyHook
    from .engine.results import BulkResult as BulkResult
    from .engine.results import ExperienceResult as ExperienceResult

__version__ = "0.1.0"

# name -> the module that defines it (imported on first access)
_LAZY = {
    "LifecycleFilter": ".engine.actors.bus", "Subscription": ".engine.actors.bus",
    "ActorStatistics": ".engine.actors.supervisor", "SupervisorStatistics": ".engine.actors.supervisor",
    "Clock": ".engine.clock", "ManualClock": ".engine.clock", "SystemClock": ".engine.clock",
    "EngineConfig": ".engine.config", "Engine": ".engine.engine", "open_engine": ".engine.engine",
    "LifecycleEvent": ".engine.model", "AllowAll": ".engine.policy", "PolicyHook": ".engine.policy",
    "BulkResult": ".engine.results", "ExperienceResult": ".engine.results",
}  # fmt: skip
_SUBPACKAGES = ("backends", "cli", "client", "engine", "examples", "http", "schemas", "server", "testing")

__all__ = ["CortexError", "DataDirLocked", "IdempotencyConflict", "Internal", "InvalidEnvelope",
           "InvalidScopeGrammar", "NotFound", "PayloadTooLarge", "PolicyDenied", "ResourceDeleted",
           "__version__", *_LAZY]  # fmt: skip


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    elif name in _SUBPACKAGES:  # ``import cortexdb; cortexdb.engine...`` as before
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
