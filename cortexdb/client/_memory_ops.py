"""Signals, memory write proposals and the intake queue (docs/signals.md, docs/proposals.md,
docs/intake.md): ``client.signals``, ``client.proposals``, ``client.intake``.  Answers are
``Record``s (attribute access to every field of the JSON answer)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ._ops import Namespace, record, rfc3339, segment
from ._records import Record
from ._transport import Call


def _items(response: Any) -> list[Record]:
    return [Record.from_wire(item) for item in response.json()["items"]]


class Signals(Namespace):
    """Decaying emotional and behavioural signals (§ docs/signals.md)."""

    def record(self, subject: str, type: str, intensity: float, *, scope: str | None = None,
               observed_at: dt.datetime | str | None = None, confidence: float | None = None,
               note: str | None = None) -> Any:  # fmt: skip
        """Record one signal; the answer is the stored signal with its effective intensity now."""
        body: dict[str, Any] = {"scope": self.resolve_scope(scope), "subject": subject, "type": type,
                                "intensity": intensity}  # fmt: skip
        if observed_at is not None:
            body["observed_at"] = rfc3339(observed_at) if isinstance(observed_at, dt.datetime) else observed_at
        if confidence is not None:
            body["confidence"] = confidence
        if note is not None:
            body["note"] = note
        return self.run(Call("POST", "/v1/signals", json=body, parse=record(Record)))

    def snapshot(self, scope: str | None = None, *, subject: str | None = None, type: str | None = None,
                 as_of: str | None = None, window: str | None = None, limit: int | None = None) -> Any:  # fmt: skip
        """Per subject and type: the level now, the trajectory over ``window`` (ISO 8601, e.g.
        ``P7D``) and the subject's overall trajectory; and the signals, newest first."""
        params = {"scope": self.resolve_scope(scope), "subject": subject, "type": type, "as_of": as_of,
                  "window": window, "limit": limit}  # fmt: skip
        return self.run(Call("GET", "/v1/signals", params=params, parse=record(Record)))

    def types(self) -> Any:
        return self.run(Call("GET", "/v1/signals/types", parse=_items))

    def set_type(self, name: str, half_life_seconds: float, *, polarity: str | None = None) -> Any:
        """The tenant's half-life and polarity of a type (tenant admins)."""
        body: dict[str, Any] = {"half_life_seconds": half_life_seconds}
        if polarity is not None:
            body["polarity"] = polarity
        return self.run(Call("PUT", f"/v1/signals/types/{segment(name)}", json=body, parse=record(Record)))

    def delete_type(self, name: str) -> Any:
        return self.run(Call("DELETE", f"/v1/signals/types/{segment(name)}", parse=record(Record)))


class Proposals(Namespace):
    """Memory write proposals (docs/proposals.md): held until a scope owner approves or rejects them."""

    def propose(self, experience: Mapping[str, Any], *, scope: str | None = None, rationale: str | None = None) -> Any:
        """Hold an experience envelope for review; the answer is the pending proposal."""
        body: dict[str, Any] = {"scope": self.resolve_scope(scope), "experience": dict(experience)}
        if rationale is not None:
            body["rationale"] = rationale
        return self.run(Call("POST", "/v1/proposals", json=body, parse=record(Record)))

    def list(self, scope: str | None = None, *, status: str | None = None, limit: int | None = None,
             cursor: str | None = None) -> Any:  # fmt: skip
        params = {"scope": self.resolve_scope(scope), "status": status, "limit": limit, "cursor": cursor}
        return self.run(Call("GET", "/v1/proposals", params=params, parse=record(Record)))

    def get(self, proposal_id: str, *, scope: str | None = None) -> Any:
        return self.run(Call("GET", f"/v1/proposals/{segment(proposal_id)}", params={"scope": self.resolve_scope(scope)},
                              parse=record(Record)))  # fmt: skip

    def approve(self, proposal_id: str, *, scope: str | None = None, note: str | None = None,
                wait: str | None = None) -> Any:  # fmt: skip
        """Approve: the write commits as the caller; ``committed`` is its experience result."""
        return self._review(proposal_id, "approve", scope, note, {"wait": wait})

    def reject(self, proposal_id: str, *, scope: str | None = None, note: str | None = None) -> Any:
        return self._review(proposal_id, "reject", scope, note, {})

    def _review(self, proposal_id: str, verb: str, scope: str | None, note: str | None, params: dict) -> Any:
        body = {"scope": self.resolve_scope(scope), **({"note": note} if note is not None else {})}
        return self.run(Call("POST", f"/v1/proposals/{segment(proposal_id)}/{verb}", json=body, params=params,
                             parse=record(Record)))  # fmt: skip


class Intake(Namespace):
    """The pending intake results of the caller's writes (docs/intake.md)."""

    def pending(self, scope: str | None = None, *, status: str | None = None, limit: int | None = None,
                cursor: str | None = None) -> Any:  # fmt: skip
        """A page (``items``, ``next_cursor``, ``has_more``) of results awaiting acknowledgement."""
        params = {"scope": self.resolve_scope(scope), "status": status, "limit": limit, "cursor": cursor}
        return self.run(Call("GET", "/v1/intake/pending", params=params, parse=record(Record)))

    def ack(self, item_id: str, *, scope: str | None = None) -> Any:
        return self.run(Call("POST", f"/v1/intake/{segment(item_id)}/ack", json={"scope": self.resolve_scope(scope)},
                             parse=record(Record)))  # fmt: skip
