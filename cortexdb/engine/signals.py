"""Signals (docs/signals.md): ``Engine.signals`` records them, answers snapshots with decayed
intensities and trajectories, hands recall its ``signals`` pack part and forgets them.

A signal is a primary record, like an event and unlike the derived layers: ``rebuild`` keeps it
and nothing re-derives it.  It lives in its scope's ``signals`` table (``SG``: scope, subject,
sig_id), written and read inside the scope's actor (``ScopeRecords``).  It is bi-temporal:
``observed_at`` is when it held (valid time), ``recorded_at`` when CortexDB learnt it
(transaction time); ``as_of`` reads what was recorded by then, decayed to then.  The decay and
trajectory rules are ``derive.signals`` (pure).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from ..errors import InvalidRequest, UnknownField
from .actors.messages import ScopeRecords
from .derive import signals as rules
from .intake import IntakeService
from .policy.capabilities import SIGNAL_READ, SIGNAL_WRITE
from .proposals import ProposalService
from .scopes import canonical_scope
from .temporal import format_ts, parse_rfc3339

FIELDS = {"scope", "subject", "type", "intensity", "confidence", "observed_at", "note"}


def _decimal(value: float) -> float:
    return round(value, 6)


class SignalService:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        config = ctx.config
        self.settings = rules.TrajectorySettings(
            window_seconds=config.signal_window_seconds, threshold=config.signal_trajectory_threshold,
            floor=config.signal_floor, custom_half_life_seconds=config.signal_custom_half_life_seconds)  # fmt: skip
        self.configured = {name: rules.check_type_settings(name, {"half_life_seconds": half, "polarity": polarity})
                           for name, half, polarity in config.signal_types}  # fmt: skip

    async def _ask(self, scope: str, work: Any) -> Any:
        return await self.ctx.supervisor.request(scope, lambda reply: ScopeRecords(work, reply))

    # -- types ---------------------------------------------------------------------------------
    async def types(self, tenant: str) -> dict[str, rules.SignalType]:
        """The types a tenant's signals decay by: built-in, then configured, then the tenant's own."""
        found = {**rules.BUILTIN_TYPES, **self.configured}
        async for name, body in self.ctx.tables.signal_types.scan(tenant):
            found[name] = rules.SignalType(name, body["half_life_seconds"], body["polarity"], name in rules.BUILTIN_TYPES)
        return found

    async def set_type(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A tenant's half-life and polarity for a type (built-in or custom)."""
        setting = rules.check_type_settings(name, body)
        await self.ctx.tables.signal_types.put((tenant, name), {"half_life_seconds": setting.half_life_seconds,
                                                                 "polarity": setting.polarity}, sync=True)  # fmt: skip
        return setting.to_wire()

    async def delete_type(self, tenant: str, name: str) -> bool:
        """The tenant's setting of a type removed (its built-in or configured one applies again)."""
        rules.check_type_name(name)
        existed = await self.ctx.tables.signal_types.exists((tenant, name))
        await self.ctx.tables.signal_types.delete((tenant, name), sync=True)
        return existed

    # -- writing -------------------------------------------------------------------------------
    async def record(self, request: dict[str, Any], *, caller: str | None = None,
                     tenant: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Record one signal; the answer is the stored signal with its effective intensity now."""
        caller, tenant = caller or self.ctx.config.default_caller, tenant or self.ctx.config.tenant_id
        signal = self._checked(request, caller)
        self.ctx.policy.check(caller, SIGNAL_WRITE, signal["scope"])
        subject = signal["subject"]

        async def write(tables: Any) -> None:
            await tables.signals.put((subject, signal["id"]), signal, sync=True)

        await self._ask(signal["scope"], write)
        kinds = await self.types(tenant)
        return self._item(signal, kinds, self.ctx.clock.now(), None)

    def _checked(self, request: Any, caller: str) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise InvalidRequest("a signal is a JSON object", details={"field": "body"})
        unknown = sorted(set(request) - FIELDS)
        if unknown:
            raise UnknownField(f"unknown field {unknown[0]}", details={"field": unknown[0], "allowed": sorted(FIELDS)})
        for field in ("scope", "subject", "type", "intensity"):
            if field not in request:
                raise InvalidRequest(f"{field} is required", details={"field": field})
        now = self.ctx.clock.now()
        observed = request.get("observed_at")
        observed_at = now if observed is None else parse_rfc3339(observed, field="observed_at")
        note, most = request.get("note"), self.ctx.config.signal_note_max_chars
        if note is not None and (not isinstance(note, str) or len(note) > most):
            raise InvalidRequest(f"note must be a string of at most {most} characters (signal_note_max_chars)",
                                 details={"field": "note", "limit": most})  # fmt: skip
        return {
            "id": self.ctx.ids.new("sig"), "scope": canonical_scope(request["scope"]),
            "subject": rules.check_subject(request["subject"]), "type": rules.check_type_name(request["type"]),
            "intensity": rules.check_unit(request, "intensity"),
            "confidence": rules.check_unit(request, "confidence", 1.0),
            "observed_at": format_ts(observed_at), "recorded_at": format_ts(now), "caller": caller,
            **({"note": note} if note is not None else {}),
        }  # fmt: skip

    # -- reading -------------------------------------------------------------------------------
    async def _read(self, scope: str, subject: str | None, kind: str | None, as_of: dt.datetime | None) -> list[dict]:
        """The scope's signals (of a subject, a type), recorded by ``as_of``, oldest first."""
        cap = self.ctx.config.signal_snapshot_max

        async def read(tables: Any) -> list[dict[str, Any]]:
            out = []
            async for _, signal in tables.signals.scan((subject,) if subject is not None else ()):
                if kind is not None and signal["type"] != kind:
                    continue
                if as_of is not None and parse_rfc3339(signal["recorded_at"]) > as_of:
                    continue
                out.append(signal)
                if len(out) > cap:
                    raise InvalidRequest(f"more than {cap} signals match (signal_snapshot_max): name a subject "
                                        "or a type", details={"field": "subject", "limit": cap})  # fmt: skip
            return out

        found = await self._ask(scope, read)
        found.sort(key=lambda s: (parse_rfc3339(s["observed_at"]), s["id"]))  # RFC 3339 text does not sort
        return found

    async def snapshot(self, scope: str, *, caller: str | None = None, tenant: str | None = None, subject: str | None = None,
                       kind: str | None = None, as_of: str | None = None, window_seconds: float | None = None,
                       limit: int | None = None) -> dict[str, Any]:  # fmt: skip
        """Per subject and type: the level now (effective intensity), the trajectory over the
        window and the subject's overall trajectory; and the signals themselves, newest first
        (at most ``limit``: ``total`` counts them all)."""
        scope = canonical_scope(scope)
        caller, tenant = caller or self.ctx.config.default_caller, tenant or self.ctx.config.tenant_id
        self.ctx.policy.check(caller, SIGNAL_READ, scope)
        if subject is not None:
            rules.check_subject(subject)
        if kind is not None:
            rules.check_type_name(kind)
        moment = parse_rfc3339(as_of, field="as_of") if as_of is not None else self.ctx.clock.now()
        settings = self.settings
        if window_seconds is not None:
            if not 0 < window_seconds <= 3650 * rules.DAY:
                raise InvalidRequest("window must be a positive number of seconds (at most ten years)",
                                    details={"field": "window"})  # fmt: skip
            settings = rules.TrajectorySettings(window_seconds, settings.threshold, settings.floor,
                                                settings.custom_half_life_seconds, settings.custom_polarity)  # fmt: skip
        limit = limit if limit is not None else self.ctx.config.read_default_limit
        if not 1 <= limit <= self.ctx.config.read_max_limit:
            raise InvalidRequest(f"limit must be from 1 to {self.ctx.config.read_max_limit}", details={"field": "limit"})
        found = await self._read(scope, subject, kind, moment if as_of is not None else None)
        kinds = await self.types(tenant)
        subjects, trajectories = self._subjects(found, kinds, moment, settings)
        items = [self._item(s, kinds, moment, trajectories) for s in reversed(found)]
        return {"scope": scope, "subject": subject, "type": kind, "as_of": format_ts(moment),
                "window_seconds": settings.window_seconds, "subjects": subjects,
                "items": items[:limit], "total": len(items), "has_more": len(items) > limit}  # fmt: skip

    def _subjects(self, found: list[dict], kinds: dict[str, rules.SignalType], moment: dt.datetime,
                  settings: rules.TrajectorySettings) -> tuple[list[dict], dict[tuple[str, str], str]]:  # fmt: skip
        grouped: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for signal in found:
            grouped[signal["subject"]][signal["type"]].append((parse_rfc3339(signal["observed_at"]), signal["intensity"]))
        subjects, trajectories = [], {}
        for subject in sorted(grouped):
            rows, changes = [], []
            for name in sorted(grouped[subject]):
                kind = rules.signal_type(name, kinds, settings)
                observations = grouped[subject][name]
                trajectory, change = rules.trajectory(observations, moment, kind.half_life_seconds, settings)
                current = rules.level(observations, moment, kind.half_life_seconds) or 0.0
                visible = [o for o in observations if o[0] <= moment]
                trajectories[(subject, name)] = trajectory
                changes.append((trajectory, change, kind.polarity))
                rows.append({"type": name, "polarity": kind.polarity, "half_life_seconds": kind.half_life_seconds,
                             "effective_intensity": _decimal(current), "trajectory": trajectory,
                             "change": _decimal(change), "observations": len(visible),
                             "last_observed_at": format_ts(max(o[0] for o in visible)) if visible else None})  # fmt: skip
            subjects.append({"subject": subject, "overall": rules.overall(changes, settings.threshold), "types": rows})
        return subjects, trajectories

    def _item(self, signal: dict[str, Any], kinds: dict[str, rules.SignalType], moment: dt.datetime,
              trajectories: dict[tuple[str, str], str] | None) -> dict[str, Any]:  # fmt: skip
        kind = rules.signal_type(signal["type"], kinds, self.settings)
        value = rules.effective(signal["intensity"], parse_rfc3339(signal["observed_at"]), moment, kind.half_life_seconds)
        item = {**signal, "effective_intensity": _decimal(value), "half_life_seconds": kind.half_life_seconds,
                "polarity": kind.polarity}  # fmt: skip
        if trajectories is not None:
            item["trajectory"] = trajectories.get((signal["subject"], signal["type"]), "neutral")
        return item

    async def for_recall(self, scopes: list[str], moment: dt.datetime, tenant: str, as_of: dt.datetime | None,
                         allowed: Any) -> tuple[list[dict[str, Any]], int, list[str]]:  # fmt: skip
        """The ``signals`` pack part: the scopes' signals the caller may read (``allowed(scope)``),
        each with its decayed intensity and its type's trajectory, strongest first, at most
        ``recall_signals_max``; and how many more there were (diagnostics' ``signals_evicted``).
        Signals decayed under the floor are left out (they are noise, not evictions).
        ``recall_signals_max`` 0 turns the part off: no signal is read.  A scope holding more than
        ``signal_snapshot_max`` signals is not read (the recall goes on): it is in the third list."""
        items: list[dict[str, Any]] = []
        unread: list[str] = []
        cap = self.ctx.config.recall_signals_max
        if cap == 0:
            return [], 0, unread
        kinds = None  # the tenant's types, read once a scope holds a signal
        for scope in scopes:
            if not allowed(scope):
                continue
            try:
                found = await self._read(scope, None, None, as_of)
            except InvalidRequest:
                unread.append(scope)
                continue
            if not found:
                continue
            if kinds is None:
                kinds = await self.types(tenant)
            _, trajectories = self._subjects(found, kinds, moment, self.settings)
            for signal in found:
                item = self._item(signal, kinds, moment, trajectories)
                if item["effective_intensity"] >= self.settings.floor:  # a reading after the moment is 0
                    items.append(item)
        items.sort(key=lambda i: (-i["effective_intensity"], i["id"]))
        return items[:cap], max(0, len(items) - cap), unread

    # -- forgetting ----------------------------------------------------------------------------
    async def forget(self, scope: str, *, subject: str | None = None, entity: str | None = None,
                     predicate: str | None = None, ids: Collection[str] | None = None, valid: Any = None,
                     recorded: Any = None, everything: bool = False) -> int:  # fmt: skip
        """Delete the scope's signals a forget selects (``forget.selector``'s fields): about
        ``subject`` or ``entity`` (a signal's subject, exactly), among ``ids`` (None: any), observed within
        ``valid`` or recorded within ``recorded`` (``TemporalFilter``s); a ``predicate`` matches
        no signal (signals have none); ``everything``: every signal of the scope."""
        wanted = set(ids) if ids is not None else None

        def selected(signal: dict[str, Any]) -> bool:
            if everything:
                return True
            if predicate is not None:
                return False
            if any(name is not None and signal["subject"] != name for name in (subject, entity)):
                return False
            if wanted is not None and signal["id"] not in wanted:
                return False
            observed = parse_rfc3339(signal["observed_at"])
            span = {"valid_from": signal["observed_at"], "valid_to": format_ts(observed + dt.timedelta(microseconds=1)),
                    "recorded_from": signal["recorded_at"], "recorded_to": None}  # fmt: skip
            return all(window is None or window.matches("signals", span) for window in (valid, recorded))

        async def delete(tables: Any) -> int:
            ops = [tables.signals.delete_op(parts) async for parts, signal in tables.signals.items() if selected(signal)]
            if ops:
                await tables.write(ops, sync=True)
            return len(ops)

        return await self._ask(canonical_scope(scope), delete)


def agent_services(engine: Any, ctx: Any) -> tuple[SignalService, ProposalService, IntakeService]:
    """The engine's signal, proposal and intake services (``Engine.signals``, ``.proposals``,
    ``.intake``); recall, forget and erasure reach them through ``ctx``."""
    ctx.signals, ctx.proposals, ctx.intake = SignalService(ctx), ProposalService(engine, ctx), IntakeService(ctx)
    return ctx.signals, ctx.proposals, ctx.intake
