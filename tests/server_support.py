"""Shared helpers for the server tests: an in-process app on the memory backend with a manual
clock and seeded ids, a reference issuer, and JWT keys."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.server import auth
from cortexdb.server.app import create_app
from cortexdb.server.call import RequestPolicyHook
from cortexdb.server.settings import ServerSettings

START = "2026-05-13T15:42:09Z"
TENANT = "acme"
JWT_ISS = "https://idp.example/acme"


def body(text: str = "I live in Paris.", scope: str = "org:acme/user:alice", **extra: Any) -> dict:
    doc = {"scope": scope, "modality": "conversation",
           "content": {"kind": "message", "role": "user", "text": text},
           "context": {"observed_at": "2026-05-13T15:42:00Z"}}  # fmt: skip
    doc.update(extra)
    return doc


class Keys:
    """A reference-issuer directory plus an RSA and a P-256 key for JWTs (with a JWKS file)."""

    def __init__(self, directory: Path, clock: ManualClock) -> None:
        self.clock = clock
        self.dir = directory / "issuer"
        auth.keygen(self.dir, iss="cortexdb-test-issuer")
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.jwks = directory / "jwks.json"
        keys = []
        for kid, key, alg in (("rsa1", self.rsa, "RS256"), ("ec1", self.ec, "ES256")):
            jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        self.jwks.write_text(json.dumps({"keys": keys}))
        self.rsa_pem = directory / "rsa_public.pem"
        self.rsa_pem.write_bytes(self.rsa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip

    def now(self) -> int:
        return int(self.clock.now().timestamp())

    def paseto(self, sub: str = "user:alice", *, tenant: str = TENANT, **kw: Any) -> str:
        return auth.mint(self.dir, sub=sub, tenant=tenant, now=kw.pop("now", self.now()), **kw)

    def claims(self, sub: str = "user:alice", **overrides: Any) -> dict[str, Any]:
        now = self.now()
        claims = {"iss": JWT_ISS, "sub": sub, "aud": f"cortexdb:tenant:{TENANT}", "iat": now,
                  "exp": now + 600, "jti": f"jwt-{sub}-{now}"}  # fmt: skip
        claims.update(overrides)
        return claims

    def jwt(self, sub: str = "user:alice", alg: str = "RS256", kid: str | None = "rsa1", **overrides: Any) -> str:
        key = self.rsa if alg == "RS256" else self.ec
        headers = {"kid": kid} if kid else None
        return jwt.encode(self.claims(sub, **overrides), key, algorithm=alg, headers=headers)


def headers(token: str | None = None, actor: str = "user:alice", **extra: str) -> dict[str, str]:
    out = {"X-Cortex-Actor": actor, **extra}
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


@asynccontextmanager
async def server(tmp_path: Path, *, preset: str = "on_prem_enterprise", keys: Keys | None = None,
                 clock: ManualClock | None = None, backend: str = "memory", engine_config: dict | None = None,
                 **settings: Any):  # fmt: skip
    """(app, test_client, keys, clock, engine) for an in-process server on the memory backend
    (or ``backend="leveldb"``, in ``tmp_path/data``); ``engine_config``: EngineConfig fields."""
    clock = clock or ManualClock(START)
    keys = keys or Keys(tmp_path, clock)
    options = dict(preset=preset, backend=backend, tenant=TENANT, issuer_dirs=[str(keys.dir)],
                   jwt_issuers=[(JWT_ISS, str(keys.jwks))], operators=("user:root",))  # fmt: skip
    options.update(settings)
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", **(engine_config or {}))
    where = {"path": str(tmp_path / "data")} if backend == "leveldb" else {}
    async with cortexdb.open_engine(backend, clock=clock, id_seed=11, config=config,
                                    policy=RequestPolicyHook(), **where) as engine:  # fmt: skip
        app = create_app(engine, ServerSettings(**options))
        async with app.test_app() as test_app:
            yield Harness(app, test_app.test_client(), keys, clock, engine)


class Harness:
    def __init__(self, app, client, keys: Keys, clock: ManualClock, engine) -> None:
        self.app, self.client, self.keys, self.clock, self.engine = app, client, keys, clock, engine

    def as_(self, actor: str, **mint: Any) -> dict[str, str]:
        return headers(self.keys.paseto(actor, **mint), actor)

    async def call(self, method: str, path: str, actor: str = "user:alice", *, json: Any = None,
                   hdrs: dict | None = None, data: bytes | str | None = None, **mint: Any):  # fmt: skip
        h = hdrs if hdrs is not None else self.as_(actor, **mint)
        kwargs = {"json": json} if json is not None else {"data": data} if data is not None else {}
        response = await self.client.open(path, method=method, headers=h, **kwargs)
        data = await response.get_data()
        parsed = None
        if data and response.content_type and "json" in response.content_type and "ndjson" not in response.content_type:
            parsed = json_loads(data)
        return response, parsed


def json_loads(data: bytes) -> Any:
    return json.loads(data)
