"""JSON Schemas (draft 2020-12): the wire contract, shipped as package data."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

NAMES = (
    "common", "experience_envelope", "event", "episode", "fact", "belief", "concept",
    "lifecycle_event", "error_envelope", "experience_result", "stratified_pack", "scope",
    "capability_set", "audit_row", "token_claims", "page", "recall_request", "forget_request",
    "answer_response", "relationship", "relationship_page", "relationship_write",
    "signal_request", "signal", "signal_snapshot", "proposal_request", "proposal", "intake_item",
)  # fmt: skip


@cache
def load(name: str) -> dict:
    """The schema ``<name>.schema.json`` as a dict."""
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text()
    return json.loads(text)


def registry():
    """A ``referencing.Registry`` holding every schema under its ``$id`` (for ``$ref`` between files)."""
    from referencing import Registry, Resource

    return Registry().with_resources(
        (load(n)["$id"], Resource.from_contents(load(n))) for n in NAMES
    )


def validator(name: str):
    """A Draft 2020-12 validator for one schema, resolving references to the others."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load(name), registry=registry())
