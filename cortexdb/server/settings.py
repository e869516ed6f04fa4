"""Server settings: flags, environment, and their defaults (reference §5.3, DESIGN §8)."""

from __future__ import annotations

import math
import os
from typing import Any

import attrs

from ..engine.config import LLM_PROVIDERS

DEFAULT_BIND = "127.0.0.1:8077"
UPLOAD_FRAMING = 1024 * 1024  # what a multipart upload's body may carry besides the blob
_positive = attrs.validators.gt(0)


@attrs.define
class ServerSettings:
    preset: str = "dev_local"  # a preset name or the path of a custom YAML file
    data_dir: str = "./data"
    backend: str = "leveldb"  # leveldb | memory | postgres
    # the postgres backend's libpq connection string or URI (CORTEX_PG_DSN / --dsn); never logged
    dsn: str | None = None
    bind: str = DEFAULT_BIND
    # several nodes on one postgres store (docs/scale-out.md): this node's id (CORTEX_NODE_ID /
    # --node-id; "" = a single node) and the base URL the other nodes reach it at (CORTEX_ADVERTISE
    # / --advertise; default: http:// and the bound address)
    node_id: str = ""
    advertise: str | None = None
    lease_ttl: float = attrs.field(default=15.0, validator=_positive)  # CORTEX_LEASE_TTL (EngineConfig.lease_ttl)
    lease_renew_interval: float = attrs.field(default=5.0, validator=_positive)  # CORTEX_LEASE_RENEW_INTERVAL
    tenant: str = "default"
    issuer_dirs: list[str] = attrs.field(factory=list)  # `cortexdb token keygen` directories
    jwt_issuers: list[tuple[str, str]] = attrs.field(factory=list)  # (iss, PEM or JWKS path)
    operators: tuple[str, ...] = ()
    # the tenant's admins: owners of every scope of the tenant and the only editors of its policy
    # (operators are admins too); docs/security.md
    tenant_admins: tuple[str, ...] = ()
    # browser origins allowed besides loopback ones (a request with any other Origin is refused);
    # "*" allows every origin
    allowed_origins: tuple[str, ...] = ()
    enable_experimental: bool = False
    # one JSON line per HTTP request on the cortexdb.access logger (request id, method, path,
    # status, ms; never headers, tokens or bodies): CORTEX_ACCESS_LOG=0 / --access-log off
    access_log: bool = True
    # arrays and objects in a request body may nest this deep (400 INVALID_BODY beyond; 1..512)
    max_json_depth: int = attrs.field(default=64, converter=int, validator=[attrs.validators.ge(1), attrs.validators.le(512)])
    # HTTP limits (docs/decisions.md, "HTTP limits"); each has a CORTEX_* variable and a flag.
    # Over them: a larger body 413; a larger request line + headers 431; a head not complete
    # head_timeout seconds after its first byte 408; a connection over max_connections 503; a
    # larger WebSocket message close 1009.
    max_body_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive)
    max_head_bytes: int = attrs.field(default=64 * 1024, validator=_positive)
    head_timeout: float = attrs.field(default=10.0, validator=_positive)
    max_connections: int = attrs.field(default=1000, validator=_positive)
    max_ws_message_bytes: int = attrs.field(default=1024 * 1024, validator=_positive)
    # the largest blob POST /v1/blobs stores (413 above it; EngineConfig.blob_max_bytes): 100 MiB.
    # An upload's body may exceed max_body_bytes: it is streamed to a staging file, not held
    max_blob_bytes: int = attrs.field(default=100 * 1024 * 1024, validator=_positive)
    # the largest source file POST /v1/import/* takes (413 above it, the spool file removed;
    # EngineConfig.import_max_bytes): 1 GiB.  Streamed to the transfer dir, never held in memory.
    max_import_bytes: int = attrs.field(default=1024 * 1024 * 1024, validator=_positive)
    # the disk a strict_temporal import's sorted runs may take (EngineConfig.import_sort_max_bytes)
    max_import_sort_bytes: int = attrs.field(default=4 * 1024 * 1024 * 1024, validator=_positive)
    embedder: str = "hash"
    # open scopes (EngineConfig.scope_memory_budget_mb and idle_timeout; docs/server.md, "Open
    # scopes"): idle scopes are released after the timeout, and least recently used first while
    # the open scopes' estimated memory exceeds the budget (0: no budget)
    scope_memory_budget_mb: float = attrs.field(default=1024.0, converter=float, validator=attrs.validators.ge(0))
    scope_idle_timeout: float = attrs.field(default=300.0, converter=float, validator=_positive)
    stream_keepalive: float = 15.0  # seconds between SSE comment lines on a quiet stream
    # a busy lifecycle stream sends one chunk per tick, at most this many seconds after its last one
    # (the streams share one tick: server/pacing.py); records published meanwhile go in the same
    # chunk (a quiet stream sends at once; decisions.md, "Lifecycle fan-out", "One tick ...")
    stream_coalesce: float = 0.05
    maintenance_interval: float = 60.0
    # CORTEX_MEMORY_TRIM_INTERVAL: seconds between the engine's returns of freed heap pages to the
    # system (EngineConfig.memory_trim_interval; 0: only after vector builds)
    memory_trim_interval: float = attrs.field(default=60.0, converter=float, validator=attrs.validators.ge(0))
    # CORTEX_LOOP_SLOW_STEP_MS: log every task step that held the event loop this many ms or more
    # (server/loopwatch.py; 0: off, nothing installed)
    loop_slow_step_ms: float = attrs.field(default=0.0, converter=float, validator=attrs.validators.ge(0))
    # CORTEX_LEVELDB_BLOCK_SIZE: bytes of LevelDB's data blocks in new tables (EngineConfig.leveldb_block_size)
    leveldb_block_size: int = attrs.field(default=4096, converter=int, validator=[
        attrs.validators.ge(1024), attrs.validators.le(4 * 1024 * 1024)])
    # "cortex": the lean HTTP/1.1 + WebSocket server cortexdb/http (default; decisions.md, "The
    # HTTP layer"); "hypercorn": Hypercorn's trio worker.
    http_server: str = attrs.field(default="cortex", validator=attrs.validators.in_(("cortex", "hypercorn")))
    # Over HTTP, consecutive writes arrive a few milliseconds apart; derivation waits for this much
    # capture silence so it runs in batches instead of between every two requests (decisions.md).
    derivation_defer: float = 0.02
    # Clock skew (seconds) allowed on a token's iat and nbf (reference §4.3: iat <= now + 60 s).
    token_leeway: float = attrs.field(default=60.0, converter=lambda v: _leeway(v))
    # per-event bounds handed to EngineConfig (its defaults; docs/decisions.md, "Bounded work")
    max_event_text_bytes: int = 1_048_576
    max_derived_per_event: int = 256
    # `cortexdb serve`'s main module is guarded, so derivation may use processes (decisions.md)
    derivation_workers: str = attrs.field(
        default="process", validator=attrs.validators.in_(("process", "thread"))
    )
    # who answers /v1/answer and view=narrative (docs/answer.md): unset fields take the preset's
    # `llm.*` defaults, then the engine's (extractive, offline).  The API key is never a setting:
    # it is read from llm_api_key_file, else from the variable llm_api_key_env names
    llm_provider: str | None = attrs.field(  # CORTEX_LLM_PROVIDER: extractive | openai_compatible
        default=None, validator=attrs.validators.optional(attrs.validators.in_(LLM_PROVIDERS)))
    llm_model: str | None = None  # CORTEX_LLM_MODEL
    llm_models: tuple[str, ...] = ()  # CORTEX_LLM_MODELS: more ids the endpoint serves (comma-separated)
    llm_base_url: str | None = None  # CORTEX_LLM_BASE_URL, e.g. http://127.0.0.1:11434/v1
    llm_api_key_file: str | None = None  # CORTEX_LLM_API_KEY_FILE
    llm_api_key_env: str = "CORTEX_LLM_API_KEY"  # the variable holding the key

    def llm_options(self, preset_defaults: dict[str, Any]) -> dict[str, Any]:
        """``EngineConfig``'s ``llm_*`` fields: these settings, else the preset's ``llm.*``."""
        options = {"llm_provider": self.llm_provider or preset_defaults.get("llm.provider"),
                   "llm_model": self.llm_model or preset_defaults.get("llm.model"),
                   "llm_models": self.llm_models or tuple(preset_defaults.get("llm.models") or ()),
                   "llm_base_url": self.llm_base_url or preset_defaults.get("llm.base_url"),
                   "llm_api_key_file": self.llm_api_key_file, "llm_api_key_env": self.llm_api_key_env}  # fmt: skip
        return {name: value for name, value in options.items() if value not in (None, ())}

    @property
    def max_upload_bytes(self) -> int:
        """The body limit of a blob upload route: a blob plus its multipart framing and fields."""
        return self.max_blob_bytes + UPLOAD_FRAMING

    def store_location(self) -> str | None:
        """What ``open_engine`` takes as ``path``: LevelDB's data directory, postgres's DSN."""
        if self.backend == "postgres":
            if not self.dsn:
                raise ValueError("the postgres backend needs --dsn or CORTEX_PG_DSN (a libpq connection string or URI)")
            return self.dsn
        return self.data_dir if self.backend == "leveldb" else None

    def upload_limit(self, path: str) -> int:
        """The body limit of an upload route by its path: an import's source, else a blob's."""
        if path.startswith("/v1/import/"):
            return self.max_import_bytes + UPLOAD_FRAMING
        return self.max_upload_bytes

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
        if env.get("CORTEX_PG_DSN"):
            values["dsn"] = env["CORTEX_PG_DSN"]
        values.update({field: env[name] for name, field in _TEXT if env.get(name)})
        if env.get("CORTEX_TENANT"):
            values["tenant"] = env["CORTEX_TENANT"]
        if env.get("CORTEX_OPERATORS"):
            values["operators"] = _csv(env["CORTEX_OPERATORS"])
        if env.get("CORTEX_TENANT_ADMINS"):
            values["tenant_admins"] = _csv(env["CORTEX_TENANT_ADMINS"])
        if env.get("CORTEX_ALLOWED_ORIGINS"):
            values["allowed_origins"] = _csv(env["CORTEX_ALLOWED_ORIGINS"])
        if env.get("CORTEX_ISSUER_KEYS"):
            values["issuer_dirs"] = [d for d in env["CORTEX_ISSUER_KEYS"].split(os.pathsep) if d]
        if env.get("CORTEX_HTTP_SERVER"):
            values["http_server"] = env["CORTEX_HTTP_SERVER"]
        if env.get("CORTEX_EMBEDDER"):
            values["embedder"] = env["CORTEX_EMBEDDER"]
        if env.get("CORTEX_TOKEN_LEEWAY"):
            values["token_leeway"] = env["CORTEX_TOKEN_LEEWAY"]
        if env.get("CORTEX_MAX_JSON_DEPTH"):
            values["max_json_depth"] = env["CORTEX_MAX_JSON_DEPTH"]
        for name, field, kind in _LIMITS:
            if env.get(name):
                try:
                    values[field] = kind(env[name])
                except ValueError:
                    raise ValueError(f"{name} must be a number, not {env[name]!r}") from None
        for name in ("max_event_text_bytes", "max_derived_per_event"):
            raw = env.get(f"CORTEX_{name.upper()}")
            if raw:
                if not raw.isdigit() or int(raw) < 1:
                    raise ValueError(
                        f"CORTEX_{name.upper()} must be a positive integer, not {raw!r}"
                    )
                values[name] = int(raw)
        if env.get("CORTEX_DERIVATION_WORKERS"):
            values["derivation_workers"] = env["CORTEX_DERIVATION_WORKERS"]
        for name in ("provider", "model", "base_url", "api_key_file"):
            if env.get(f"CORTEX_LLM_{name.upper()}"):
                values[f"llm_{name}"] = env[f"CORTEX_LLM_{name.upper()}"]
        if values.get("llm_provider", LLM_PROVIDERS[0]) not in LLM_PROVIDERS:
            raise ValueError(f"CORTEX_LLM_PROVIDER must be one of {', '.join(LLM_PROVIDERS)}, not {values['llm_provider']!r}")
        if env.get("CORTEX_LLM_MODELS"):
            values["llm_models"] = _csv(env["CORTEX_LLM_MODELS"])
        values["enable_experimental"] = env.get("CORTEX_ENABLE_EXPERIMENTAL", "") in ("1", "true", "yes")
        if env.get("CORTEX_ACCESS_LOG"):
            values["access_log"] = _switch("CORTEX_ACCESS_LOG", env["CORTEX_ACCESS_LOG"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _switch(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"{name} must be on or off (1/0, true/false, yes/no), not {text!r}")
    return word in ("1", "true", "yes", "on")


def _csv(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _leeway(value: Any) -> float:
    """CORTEX_TOKEN_LEEWAY / --token-leeway: 0 to 3600 seconds (more would void iat and nbf)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 <= seconds <= 3600:  # NaN fails too
        raise ValueError(f"the token leeway must be 0 to 3600 seconds, not {value!r}")
    return seconds
_TEXT = (("CORTEX_BIND", "bind"), ("CORTEX_NODE_ID", "node_id"), ("CORTEX_ADVERTISE", "advertise"))
_LIMITS = (("CORTEX_MAX_BODY_BYTES", "max_body_bytes", int), ("CORTEX_MAX_HEAD_BYTES", "max_head_bytes", int),
           ("CORTEX_HEAD_TIMEOUT", "head_timeout", float), ("CORTEX_MAX_CONNECTIONS", "max_connections", int),
           ("CORTEX_MAX_WS_MESSAGE_BYTES", "max_ws_message_bytes", int),
           ("CORTEX_MAX_BLOB_BYTES", "max_blob_bytes", int), ("CORTEX_MAX_IMPORT_BYTES", "max_import_bytes", int),
           ("CORTEX_MAX_IMPORT_SORT_BYTES", "max_import_sort_bytes", int),
           ("CORTEX_LEASE_TTL", "lease_ttl", float), ("CORTEX_LEASE_RENEW_INTERVAL", "lease_renew_interval", float),
           ("CORTEX_SCOPE_MEMORY_BUDGET_MB", "scope_memory_budget_mb", float),
           ("CORTEX_SCOPE_IDLE_TIMEOUT", "scope_idle_timeout", float),
           ("CORTEX_MEMORY_TRIM_INTERVAL", "memory_trim_interval", float),
           ("CORTEX_LOOP_SLOW_STEP_MS", "loop_slow_step_ms", float),
           ("CORTEX_LEVELDB_BLOCK_SIZE", "leveldb_block_size", int))  # fmt: skip
