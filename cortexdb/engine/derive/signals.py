"""Signals: decaying emotional and behavioural readings of a subject (docs/signals.md).  Pure.

A signal is one observation: ``type`` (``frustration``, ...), ``intensity`` in [0, 1], the
``subject`` it is about and when it was observed.  What is read is not the stored intensity but
the *effective* one, decayed exponentially from ``observed_at`` with the type's half-life:
``intensity * 0.5 ** (age / half_life)``.  A type's settings (``SignalType``) come from the
built-in table below, then the engine's ``signal_types`` config, then the tenant's overrides.

The *level* of a type at a moment is the latest observation at or before it, decayed to that
moment.  The *trajectory* compares the level at the end of the window (``now``) with the level
at its start (``now - window``):

| level now vs at the window's start     | trajectory |
|----------------------------------------|------------|
| no observation at or before now, or both levels under ``floor`` | ``neutral`` |
| up by more than ``threshold``          | ``warming`` |
| down by more than ``threshold``        | ``cooling`` |
| otherwise                              | ``stable``  |

A subject's ``overall`` trajectory weighs each type's change by its polarity (+1 positive, -1
negative): frustration going down warms the subject's state like satisfaction going up does.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ...errors import InvalidRequest

POLARITIES = {"positive": 1, "negative": -1}
TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
SUBJECT_MAX = 256
TRAJECTORIES = ("warming", "cooling", "stable", "neutral")
DAY = 86_400.0


@attrs.frozen
class SignalType:
    name: str
    half_life_seconds: float
    polarity: str  # positive | negative
    builtin: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.name, "half_life_seconds": self.half_life_seconds,
                "polarity": self.polarity, "builtin": self.builtin}  # fmt: skip


#: the built-in types: half-lives reflect how long such a state usually lasts
BUILTIN_TYPES: dict[str, SignalType] = {t.name: t for t in (
    SignalType("frustration", 3 * DAY, "negative", True),
    SignalType("confusion", 1 * DAY, "negative", True),
    SignalType("anxiety", 3 * DAY, "negative", True),
    SignalType("urgency", 0.5 * DAY, "negative", True),
    SignalType("satisfaction", 7 * DAY, "positive", True),
    SignalType("enthusiasm", 3 * DAY, "positive", True),
    SignalType("engagement", 7 * DAY, "positive", True),
    SignalType("trust", 30 * DAY, "positive", True),
)}  # fmt: skip


@attrs.frozen
class TrajectorySettings:
    window_seconds: float = 7 * DAY
    threshold: float = 0.1  # a change of the level smaller than this is stable
    floor: float = 0.05  # levels under it count as nothing (fully decayed)
    custom_half_life_seconds: float = 3 * DAY  # a custom type with no settings of its own
    custom_polarity: str = "negative"


def signal_type(name: str, overrides: Mapping[str, SignalType], settings: TrajectorySettings) -> SignalType:
    """The settings of a type: the overrides' (config, then tenant), else built-in, else custom defaults."""
    if name in overrides:
        return overrides[name]
    if name in BUILTIN_TYPES:
        return BUILTIN_TYPES[name]
    return SignalType(name, settings.custom_half_life_seconds, settings.custom_polarity)


def check_type_settings(name: Any, body: Mapping[str, Any]) -> SignalType:
    """A type setting as sent (``half_life_seconds`` > 0, ``polarity``), checked."""
    check_type_name(name)
    unknown = set(body) - {"half_life_seconds", "polarity"}
    if unknown:
        raise InvalidRequest(f"unknown field {sorted(unknown)[0]}", details={"field": sorted(unknown)[0]})
    half_life = body.get("half_life_seconds")
    if isinstance(half_life, bool) or not isinstance(half_life, int | float) or not 0 < half_life <= 3650 * DAY:
        raise InvalidRequest("half_life_seconds must be a number of seconds above 0 and at most ten years",
                            details={"field": "half_life_seconds"})  # fmt: skip
    polarity = body.get("polarity", BUILTIN_TYPES[name].polarity if name in BUILTIN_TYPES else "negative")
    if polarity not in POLARITIES:
        raise InvalidRequest("polarity must be positive or negative", details={"field": "polarity"})
    return SignalType(name, float(half_life), polarity, name in BUILTIN_TYPES)


def check_type_name(name: Any) -> str:
    if not isinstance(name, str) or not TYPE_NAME.match(name):
        raise InvalidRequest("type must be a lowercase name of letters, digits and underscores "
                            "(at most 64 characters, starting with a letter)", details={"field": "type"})  # fmt: skip
    return name


def check_unit(body: Mapping[str, Any], field: str, default: float | None = None) -> float:
    value = body.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidRequest(f"{field} must be a number from 0 to 1", details={"field": field})
    return float(value)


def check_subject(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > SUBJECT_MAX or "\x00" in value:
        raise InvalidRequest(f"subject must be a non-empty string of at most {SUBJECT_MAX} characters",
                            details={"field": "subject"})  # fmt: skip
    return value


def effective(intensity: float, observed_at: dt.datetime, now: dt.datetime, half_life_seconds: float) -> float:
    """The intensity decayed from ``observed_at`` to ``now`` (an observation after ``now`` is not
    yet visible: 0)."""
    age = (now - observed_at).total_seconds()
    if age < 0:
        return 0.0
    return intensity * 0.5 ** (age / half_life_seconds)


def level(observations: Iterable[tuple[dt.datetime, float]], moment: dt.datetime, half_life_seconds: float) -> float | None:
    """The latest observation at or before ``moment``, decayed to it (None: there is none)."""
    latest = None
    for observed_at, intensity in observations:
        if observed_at <= moment and (latest is None or observed_at >= latest[0]):
            latest = (observed_at, intensity)
    if latest is None:
        return None
    return effective(latest[1], latest[0], moment, half_life_seconds)


def trajectory(observations: list[tuple[dt.datetime, float]], now: dt.datetime, half_life_seconds: float,
               settings: TrajectorySettings) -> tuple[str, float]:  # fmt: skip
    """``(trajectory, change)``: the level now against the level at the window's start."""
    current = level(observations, now, half_life_seconds)
    if current is None:
        return "neutral", 0.0
    start = level(observations, now - dt.timedelta(seconds=settings.window_seconds), half_life_seconds) or 0.0
    if current < settings.floor and start < settings.floor:
        return "neutral", 0.0
    change = current - start
    return classify(change, settings.threshold), change


def classify(change: float, threshold: float) -> str:
    if change > threshold:
        return "warming"
    if change < -threshold:
        return "cooling"
    return "stable"


def overall(changes: Iterable[tuple[str, float, str]], threshold: float) -> str:
    """A subject's trajectory from its types' ``(trajectory, change, polarity)``: positive types
    count their change, negative ones its opposite."""
    rows = [row for row in changes if row[0] != "neutral"]
    if not rows:
        return "neutral"
    return classify(sum(change * POLARITIES[polarity] for _, change, polarity in rows), threshold)
