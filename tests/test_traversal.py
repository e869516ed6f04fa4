"""One traversal (``engine/recall/traversal.py``), two surfaces: over the same hierarchy, recall
and a multi-scope layer read cover the same scopes, in the same order, and report the same
denied placeholders (existence and a count, never content)."""

from __future__ import annotations

import json

import pytest

from .server_support import body, server

ALICE = "org:acme/user:alice"
SECRET = "Zorblax"


async def hierarchy(h) -> None:
    """org:acme is registered for the admins only (alice's scope sits below it); in ws:team,
    which alice reads, project:x is bob's alone and project:y is shared."""
    await h.call("POST", "/v1/scopes", "user:root", json={"path": "org:acme", "members": [
        {"actor": "user:root", "role": "owner"}]})  # fmt: skip
    members = [{"actor": "user:bob", "role": "owner"}, {"actor": "user:alice", "role": "reader"}]
    await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team", "members": members})
    await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team/project:x", "members": members[:1]})
    await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team/project:y", "members": members})
    writes = [("user:root", "org:acme", f"{SECRET} budget is 9M."), ("user:alice", ALICE, "I like tea."),
              ("user:bob", "ws:team", "Standup at nine."),
              ("user:bob", "ws:team/project:x", f"{SECRET} ships Friday."),
              ("user:bob", "ws:team/project:y", "The demo is on Monday."),
              ("user:bob", "ws:team/project:x", f"{SECRET} needs a name.")]  # fmt: skip
    for actor, scope, text in writes:
        response, _ = await h.call("POST", "/v1/experience?wait=indexed", actor, json=body(text, scope=scope))
        assert response.status_code == 200


@pytest.mark.parametrize(("start", "view"), [(ALICE, "holistic"), ("ws:team", "descend")])
async def test_recall_and_layer_reads_traverse_alike(tmp_path, start, view):
    async with server(tmp_path) as h:
        await hierarchy(h)
        response, pack = await h.call("POST", "/v1/recall", json={
            "scope": start, "traversal": view, "query": f"{SECRET} tea standup demo", "diagnostics": "summary"})  # fmt: skip
        assert response.status_code == 200, pack
        trail = next(p for p in pack["provenance"]["trail"] if p["phase"] == "traverse")
        recalled = pack["diagnostics"]["scopes_traversed"]
        for layer in ("events", "episodes", "facts", "beliefs"):  # every layer read (§18.2 item 4)
            response, page = await h.call("GET", f"/v1/{layer}?scope={start}&view={view}")
            assert response.status_code == 200, page
            read = page["scopes_traversed"]
            readable = [s["scope"] for s in read if not s.get("denied")]
            assert readable == trail["scopes"] == [s["scope"] for s in recalled if not s.get("denied")]
            placeholders = [s for s in read if s.get("denied")]
            assert placeholders == [s for s in recalled if s.get("denied")]
            assert [{"scope": s["scope"], "denied_reason": s["denied_reason"]} for s in placeholders] == trail["skipped"]
            assert SECRET not in json.dumps(page["items"])
        assert SECRET not in json.dumps(pack)
        denied = {"holistic": [("org:acme", 1)], "descend": [("ws:team/project:x", 2)]}[view]
        assert [(s["scope"], s["item_count"]) for s in placeholders] == denied
        assert all(s["denied"] is True and s["denied_reason"] == "scope" for s in placeholders)
        expected = {"holistic": [ALICE], "descend": ["ws:team", "ws:team/project:y"]}[view]
        assert trail["scopes"] == expected
