"""Server settings: flags, environment, and their defaults (reference §5.3, DESIGN §8)."""

from __future__ import annotations

import os
from typing import Any

import attrs

DEFAULT_BIND = "127.0.0.1:8077"


@attrs.define
class ServerSettings:
    preset: str = "dev_local"  # a preset name or the path of a custom YAML file
    data_dir: str = "./data"
    backend: str = "leveldb"
    bind: str = DEFAULT_BIND
    tenant: str = "default"
    issuer_dirs: list[str] = attrs.field(factory=list)  # `cortexdb token keygen` directories
    jwt_issuers: list[tuple[str, str]] = attrs.field(factory=list)  # (iss, PEM or JWKS path)
    operators: tuple[str, ...] = ()
    enable_experimental: bool = False
    max_body_bytes: int = 16 * 1024 * 1024
    embedder: str = "hash"
    stream_keepalive: float = 15.0  # seconds between SSE comment lines on a quiet stream
    # a lifecycle stream sends at most one chunk per this many seconds; records published meanwhile
    # go in the same chunk (a quiet stream sends at once; decisions.md, "Lifecycle fan-out")
    stream_coalesce: float = 0.05
    maintenance_interval: float = 60.0
    # "cortex": the lean HTTP/1.1 + WebSocket server in http11.py (default; decisions.md, "The
    # HTTP layer"); "hypercorn": Hypercorn's trio worker.
    http_server: str = attrs.field(default="cortex", validator=attrs.validators.in_(("cortex", "hypercorn")))
    # Over HTTP, consecutive writes arrive a few milliseconds apart; derivation waits for this much
    # capture silence so it runs in batches instead of between every two requests (decisions.md).
    derivation_defer: float = 0.02

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> ServerSettings:
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        if env.get("CORTEX_DEPLOYMENT_PRESET"):
            values["preset"] = env["CORTEX_DEPLOYMENT_PRESET"]
        if env.get("CORTEX_DATA_DIR"):
            values["data_dir"] = env["CORTEX_DATA_DIR"]
        if env.get("CORTEX_BACKEND"):
            values["backend"] = env["CORTEX_BACKEND"]
        if env.get("CORTEX_BIND"):
            values["bind"] = env["CORTEX_BIND"]
        if env.get("CORTEX_TENANT"):
            values["tenant"] = env["CORTEX_TENANT"]
        if env.get("CORTEX_OPERATORS"):
            values["operators"] = tuple(a.strip() for a in env["CORTEX_OPERATORS"].split(",") if a.strip())
        if env.get("CORTEX_ISSUER_KEYS"):
            values["issuer_dirs"] = [d for d in env["CORTEX_ISSUER_KEYS"].split(os.pathsep) if d]
        if env.get("CORTEX_HTTP_SERVER"):
            values["http_server"] = env["CORTEX_HTTP_SERVER"]
        if env.get("CORTEX_EMBEDDER"):
            values["embedder"] = env["CORTEX_EMBEDDER"]
        values["enable_experimental"] = env.get("CORTEX_ENABLE_EXPERIMENTAL", "") in ("1", "true", "yes")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
