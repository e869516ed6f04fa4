"""CortexDB: a memory database for AI agents.

The embedding face::

    async with cortexdb.open_engine("leveldb", path="./data") as engine:
        result = await engine.experience(envelope, caller="user:alice", wait="consolidated")
"""

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

__version__ = "0.1.0"
