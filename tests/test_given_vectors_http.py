"""Given vectors over HTTP (``POST /v1/experience/bulk`` and ``/v1/experience``) through the SDK,
whose bulk items take a ``vector`` (a list or a numpy array): docs/embedding.md, "Given vectors"."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cortexdb import EngineConfig
from cortexdb.client import AsyncCortexClient
from cortexdb.errors import CortexError

from .sdk_support import NOW, live
from .server_support import server
from .test_given_vectors import APPLES, HASH, ZEBRAS

ALICE = "org:acme/dept:eng/user:alice"


async def test_bulk_writes_with_given_vectors_over_http_and_clear_refusals(tmp_path):
    config = EngineConfig(episode_idle_check=3600.0, recall_mode="vector")
    async with (live(tmp_path, engine_config=config) as (url, _),
                AsyncCortexClient(url, actor="user:alice", scope=ALICE, now=lambda: NOW) as sdk):  # fmt: skip
        bulk = await sdk.experience_bulk([
            {"text": "I had apples for lunch.", "vector": HASH.embed([ZEBRAS])[0]},  # numpy
            {"text": "We watched zebras at the zoo.", "vector": HASH.embed([APPLES])[0].tolist()},
        ])  # fmt: skip
        assert bulk.accepted == 2
        await sdk.experience("It rained all day.", wait="indexed")  # the scope's queue is drained
        pack = await sdk.recall(ZEBRAS, include=["events"], view="granular", diagnostics="none")
        assert [e.text for e in pack.layers.events][0] == "I had apples for lunch."
        refusals = [
            ([0.5] * 3, 422, "items[1].vector", "has 3 numbers; this store's embedder (hash-v1) has 384 dimensions"),
            (["x"] * 384, 422, "items[1].vector", "must be an array of numbers"),
            ([0.0] * 384, 422, "items[1].vector", "must not be all zeros"),
        ]  # fmt: skip
        for vector, status, field, reason in refusals:
            with pytest.raises(CortexError) as refused:
                await sdk.experience_bulk(["fine", {"text": "not fine", "vector": vector}])
            assert refused.value.http_status == status
            assert (refused.value.details["field"], refused.value.details["reason"]) == (field, reason)
        with pytest.raises(ValueError):  # JSON has no NaN: the SDK refuses to send one
            await sdk.experience_bulk([{"text": "nan", "vector": [math.nan] + [0.1] * 383}])
        with pytest.raises(CortexError) as single:  # the single write takes it too
            await sdk.experience("x", vector=np.ones(5))
        assert single.value.details["field"] == "vector" and single.value.http_status == 422


async def test_a_non_finite_number_in_a_raw_body_is_a_4xx(tmp_path):
    async with server(tmp_path) as h:
        numbers = ", ".join(["1e999"] + ["0.1"] * 383)  # parses to infinity
        item = {"modality": "conversation", "content": {"kind": "message", "role": "user", "text": "x"},
                "context": {"observed_at": "2026-05-13T15:00:00Z"}, "vector": "NUMBERS"}
        raw = json.dumps({"scope": ALICE, "items": [item]}).replace('"NUMBERS"', f"[{numbers}]")
        response, body = await h.call("POST", "/v1/experience/bulk", data=raw,
                                      hdrs={**h.as_("user:alice"), "Content-Type": "application/json"})  # fmt: skip
        assert response.status_code == 400 and body["error_code"] == "INVALID_BODY", body
        ok = raw.replace("1e999", "0.2")
        response, body = await h.call("POST", "/v1/experience/bulk", data=ok,
                                      hdrs={**h.as_("user:alice"), "Content-Type": "application/json"})  # fmt: skip
        assert response.status_code == 202 and body["accepted"] == 1
