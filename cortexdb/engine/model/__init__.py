"""attrs records for every layer and the one cattrs converter.  Pure: no I/O."""

from .converter import converter, dumps, encode_json, from_wire, loads, to_wire
from .records import (
    Belief,
    Candidate,
    CausalLink,
    Concept,
    ConfidenceInterval,
    Entity,
    Episode,
    Event,
    EventState,
    Fact,
    LifecycleEvent,
    RevisionPolicy,
    Scope,
    SupportRef,
    TypedRef,
    TypedValue,
)

__all__ = [
    "Belief", "Candidate", "CausalLink", "Concept", "ConfidenceInterval", "Entity", "Episode",
    "Event", "EventState", "Fact", "LifecycleEvent", "RevisionPolicy", "Scope", "SupportRef",
    "TypedRef", "TypedValue", "converter", "dumps", "encode_json", "from_wire", "loads", "to_wire",
]  # fmt: skip
