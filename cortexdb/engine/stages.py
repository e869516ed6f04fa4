"""The pipeline's stages: the only place their names are spelled (DESIGN §1.1, rule 9).

An event is ``captured`` into the WAL, then the derivation lane takes it through ``extracted``
(facts and entities), ``indexed`` (text and vector indexes) and ``consolidated`` (beliefs); each
is a lifecycle record (reference §13) and an entry of the event's ``EventState.done``.  The lane's
last per-event step, ``episode``, puts the event into its episode window: it is internal (no
lifecycle record, only ``done``), because ``compressed`` is announced once, when the episode
seals, for all of its events.

``Stage`` is a ``StrEnum``: a member *is* its string (``Stage.INDEXED == "indexed"``), so stored
state, lifecycle payloads and HTTP bodies carry the same words as before.  orjson refuses a
``StrEnum`` as a *dict key*, so a stage that keys a JSON object is written as ``stage.value``.
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    CAPTURED = "captured"
    EXTRACTED = "extracted"
    INDEXED = "indexed"
    CONSOLIDATED = "consolidated"
    COMPRESSED = "compressed"
    #: internal: the event joined its episode window (``compressed`` comes when the window seals)
    EPISODE_JOINED = "episode"


#: each stage's word as a plain ``str`` (hot paths: an enum member's ``.value`` is a descriptor call)
STAGE_NAME: dict[Stage, str] = {stage: stage.value for stage in Stage}
#: the lifecycle stages of a memory event, in order (reference §13)
LIFECYCLE_STAGES = (
    Stage.CAPTURED, Stage.EXTRACTED, Stage.INDEXED, Stage.CONSOLIDATED, Stage.COMPRESSED,
)  # fmt: skip
#: a lifecycle record's per-event sequence number (``seq``; 0 = captured)
STAGE_SEQ: dict[str, int] = {stage.value: seq for seq, stage in enumerate(LIFECYCLE_STAGES)}
#: the derivation lane's steps after capture, in the order it runs them
LANE_STEPS = (Stage.EXTRACTED, Stage.INDEXED, Stage.CONSOLIDATED, Stage.EPISODE_JOINED)
#: the lane's steps in the groups it writes once each (docs/decisions.md, "One write per group of
#: stages"): a group's steps commit in one atomic write, the events' states written once (a
#: ``wait=indexed`` is answered when it was; ``consolidated`` after the episode step, which follows it)
LANE_GROUPS = ((Stage.EXTRACTED, Stage.INDEXED), (Stage.CONSOLIDATED, Stage.EPISODE_JOINED))
#: the stages an event's own pipeline completes, in order (what ``wait=`` can wait for)
STAGE_ORDER = (Stage.CAPTURED, Stage.EXTRACTED, Stage.INDEXED, Stage.CONSOLIDATED)
#: the ``wait`` modes of a write (None: answer once the WAL has it)
WAIT_MODES = (None, Stage.CAPTURED, Stage.INDEXED, Stage.CONSOLIDATED)
#: the name each step's duration carries in ``elapsed_ms`` (an event's state, a write's result)
STAGE_TIMING: dict[str, str] = {
    Stage.CAPTURED.value: "capture",
    Stage.EXTRACTED.value: "extract",
    Stage.INDEXED.value: "index",
    Stage.CONSOLIDATED.value: "consolidate",
    Stage.EPISODE_JOINED.value: "compress",
}
#: the key of ``EventState.stage_derives`` under which records derived in other scopes (by
#: ``directives.consolidate_into``) are listed
FOREIGN_DERIVES = "foreign"

#: an episode's ``status``: ``open`` while its window takes events, then ``compressed`` (sealed:
#: the word is the stage's, since sealing is what the ``compressed`` record announces)
EPISODE_OPEN = "open"
EPISODE_SEALED = Stage.COMPRESSED.value


#: the lifecycle records of a GDPR erasure job (reference §8.6.6, §13): a tick per step of its
#: phases, and its end (``payload.status``: completed, cancelled or failed)
ERASURE_PROGRESS = "erasure_progress"
ERASURE_COMPLETE = "erasure_complete"
#: the end of a bulk write: every event of a ``batch_id`` has been derived (actors/batches.py)
BATCH_COMPLETE = "batch_complete"
#: the phases of an erasure (reference §11.3), in order: ``status.phase`` names one of them
ERASURE_PHASES = ("enumerate", "refcount", "categorize", "delete", "demote")
#: the lifecycle records of import and export jobs (reference §8.11-§8.12, §13): a tick per
#: committed batch, and the end (``payload.status``: completed, cancelled or failed)
IMPORT_PROGRESS = "import_progress"
IMPORT_COMPLETE = "import_complete"
EXPORT_PROGRESS = "export_progress"
EXPORT_COMPLETE = "export_complete"
#: the lifecycle records of a synthesize job (reference §8.7.11): a tick per scope re-synthesized,
#: and its end (``payload.status``: completed, cancelled or failed)
SYNTHESIS_PROGRESS = "synthesis_progress"
SYNTHESIS_COMPLETE = "synthesis_complete"
#: the lifecycle records of a re-segmentation job (a scope's segment strategy changed): a tick
#: per chunk of events windowed again, and the end (``payload.status``)
SEGMENTATION_PROGRESS = "segmentation_progress"
SEGMENTATION_COMPLETE = "segmentation_complete"
#: the phases of an import (write the records, then settle) and of an export (write the file)
IMPORT_PHASES = ("write", "settle")
EXPORT_PHASES = ("write", "deliver")


def at_scope(stage: str, scope: str) -> str:
    """The waiter key of a stage run in another scope (``consolidated@org:acme``): a write with
    ``directives.consolidate_into`` and ``wait=consolidated`` waits for the target's record too."""
    return f"{stage}@{scope}"
