"""Signed-token authentication (reference §4) and the reference issuer (``cortexdb token``).

Two wire formats, chosen by the token's shape: PASETO ``v4.public.`` (pyseto) and JWT with
RS256/ES256 only (pyjwt, always with an explicit ``algorithms=[alg]``; the key is picked by
``kid`` and ``alg``, because an ES256 token checked against an RSA key raises ``TypeError``).
Every decode failure is a 401.  Validation follows §4.3: signature, ``iss`` on the allowlist,
``aud`` = the deployment's tenant binding, ``exp``/``iat``/``nbf`` (finite NumericDates; ``iat``
and ``nbf`` get the configured leeway), revocation by ``jti``, and ``X-Cortex-Actor`` = ``sub``.
Token contents are never logged.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import json
import math
import os
import re
import secrets
from pathlib import Path
from typing import Any

import attrs
import jwt
import pyseto
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from ..engine.policy.capabilities import CAPABILITIES
from ..errors import (
    ActorMismatch,
    AuthError,
    ExpiredToken,
    InvalidMintRequest,
    InvalidToken,
    InvalidTokenSignature,
    IssuerConfigError,
    MissingToken,
    RevokedToken,
    WrongTenant,
)
from .policy import Principal

JWT_ALGORITHMS = ("RS256", "ES256")
MAX_USER_TTL = 24 * 3600  # §4.2: exp at most 24 h after iat
MAX_SERVICE_TTL = 30 * 24 * 3600  # §4.4: 30 d for service:<name> subjects
DEFAULT_LEEWAY = 60  # seconds of clock skew allowed on iat and nbf (§4.3: iat <= now + 60 s)
REQUIRED_CLAIMS = ("iss", "sub", "aud", "exp", "iat", "jti")
ACTOR_ID = re.compile(r"[a-z][a-z0-9_]*:[A-Za-z0-9_.@+\-]{1,200}")
DATE_CLAIMS = ("exp", "iat", "nbf")  # nbf is optional


def ttl_limit(sub: str) -> int:
    """The longest lifetime (exp - iat) a token for ``sub`` may have; mint and verifier share it."""
    return MAX_SERVICE_TTL if sub.startswith("service:") else MAX_USER_TTL


def is_numeric_date(value: Any) -> bool:
    """A JWT NumericDate as JSON can carry it: a finite int or float (not a bool, NaN or ±inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)












@attrs.define
class JwtKey:
    key: Any
    alg: str
    kid: str | None = None


@attrs.define
class Issuer:
    iss: str
    paseto: list[Any] = attrs.field(factory=list)  # pyseto v4.public keys
    jwt: list[JwtKey] = attrs.field(factory=list)


def _alg_of(key: Any) -> str:
    if isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise IssuerConfigError("a private key: configure the issuer's public key only")
    if isinstance(key, rsa.RSAPublicKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name != "secp256r1":
            raise IssuerConfigError(f"unsupported EC curve {key.curve.name}: ES256 needs P-256")
        return "ES256"
    raise IssuerConfigError(f"unsupported JWT key type {type(key).__name__}: RS256 (RSA) or ES256 (P-256) only")


def _jwk_key(jwk: Any, index: int) -> JwtKey | None:
    """One JWKS entry as a key, ``None`` for one that is not for RS256/ES256 signatures, or an
    :class:`IssuerConfigError` naming the entry (by ``kid``) for a key that contradicts its ``alg``."""
    if not isinstance(jwk, dict):
        raise IssuerConfigError(f"JWKS key #{index} is not a JSON object")
    kid = jwk.get("kid")
    name = f"key kid={kid!r}" if kid is not None else f"key #{index} (no kid)"
    if kid is not None and not isinstance(kid, str):
        raise IssuerConfigError(f"JWKS {name}: kid must be a string", details={"kid": str(kid)})
    alg = jwk.get("alg")
    if alg not in (None, *JWT_ALGORITHMS):
        return None  # HS256 / none / others are never accepted
    try:  # the key from its kty/crv alone; its declared alg is checked against it below
        key = jwt.PyJWK({k: v for k, v in jwk.items() if k != "alg"}).key
    except Exception as exc:  # PyJWKError / InvalidKeyError / ValueError: not a usable public key
        raise IssuerConfigError(f"JWKS {name}: not a usable key ({exc})", details={"kid": kid}) from None
    contradiction = f"alg {alg} contradicts its key type: " if alg is not None else ""
    try:
        actual = _alg_of(key)
    except IssuerConfigError as exc:
        raise IssuerConfigError(f"JWKS {name}: {contradiction}{exc.message}", details={"kid": kid}) from None
    if alg is not None and alg != actual:
        kind = "an RSA key signs RS256" if actual == "RS256" else "a P-256 EC key signs ES256"
        raise IssuerConfigError(f"JWKS {name}: {contradiction}{kind}", details={"kid": kid, "alg": alg})
    return JwtKey(key=key, alg=actual, kid=kid)


def load_jwt_keys(path: str | Path) -> list[JwtKey]:
    """A PEM public key, or a JWKS file (``{"keys": [...]}``) of RSA / P-256 keys.

    Entries whose ``alg`` is not RS256/ES256 are skipped; a key whose type contradicts its
    ``alg`` (RS256 on an EC key, ES256 on an RSA key or another curve) or of an unsupported type
    is an :class:`IssuerConfigError` (the server refuses to start), never a silently dead key."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".json" or data.lstrip().startswith(b"{"):
        document = json.loads(data)
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise IssuerConfigError(f"{path}: a JWKS must be a JSON object with a \"keys\" list")
        found = [key for index, jwk in enumerate(entries) if (key := _jwk_key(jwk, index)) is not None]
        if not found:
            raise IssuerConfigError(f"{path}: no RS256/ES256 keys in the JWKS")
        return found
    try:
        key = serialization.load_pem_public_key(data)
    except Exception as exc:  # ValueError (not PEM), UnsupportedAlgorithm (unknown key type)
        raise IssuerConfigError(f"{path}: not a PEM public key ({exc})") from None
    return [JwtKey(key=key, alg=_alg_of(key))]


def load_issuer_dir(directory: str | Path) -> Issuer:
    """A directory made by ``cortexdb token keygen``: ``issuer.json`` and ``public.pem``."""
    directory = Path(directory)
    meta = json.loads((directory / "issuer.json").read_text())
    if not isinstance(meta, dict) or not isinstance(meta.get("iss"), str) or not meta["iss"]:
        raise ValueError("issuer.json must be an object with a non-empty string \"iss\"")
    public = (directory / "public.pem").read_bytes()
    return Issuer(iss=meta["iss"], paseto=[pyseto.Key.new(4, "public", public)])  # ValueError: not Ed25519


class Revocations:
    """Revoked ``jti`` values, each kept until its token's ``exp`` (then pruned).  Persisted in
    the engine's ``revoked`` table (``Engine.tables.revoked``: jti -> {exp, reason})."""

    MAX = 1_000_000

    def __init__(self, table: Any) -> None:
        self.table = table
        self.revoked: dict[str, int] = {}

    async def load(self) -> None:
        async for jti, record in self.table.scan():
            self.revoked[jti] = int(record["exp"])

    async def revoke(self, jti: str, exp: int, reason: str | None) -> None:
        record = {"exp": exp, "reason": reason}
        await self.table.put(jti, record, sync=True)
        self.revoked[jti] = exp

    def is_revoked(self, jti: str) -> bool:
        return jti in self.revoked

    async def prune(self, now: int) -> int:
        gone = [jti for jti, exp in self.revoked.items() if exp <= now]
        if gone:
            await self.table.write([self.table.delete_op(j) for j in gone])
            for jti in gone:
                del self.revoked[jti]
        return len(gone)


class Verifier:
    def __init__(self, issuers: list[Issuer], tenant: str, revocations: Revocations,
                 now: Any, leeway: float = DEFAULT_LEEWAY) -> None:  # fmt: skip
        self.issuers = {i.iss: i for i in issuers}
        self.leeway = leeway  # seconds of clock skew allowed on iat and nbf
        self.tenant = tenant
        self.audience = f"cortexdb:tenant:{tenant}"
        self.revocations = revocations
        self._now = now  # () -> unix seconds
        # token -> signature-verified claims.  Verifying costs ~0.3 ms per call and a client
        # sends the same token on every request; the time-, tenant- and revocation-dependent
        # checks (_claims) still run on every call.
        self._verified: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()

    CACHE_SIZE = 10_000

    def verify(self, token: str) -> dict[str, Any]:
        """Verify signature and claims (§4.3 steps 1–5); return the claims."""
        cached = self._verified.get(token)
        if cached is not None:
            self._verified.move_to_end(token)
            return self._claims(cached)
        claims = self._verify_signature(token)
        if isinstance(claims, dict):
            self._verified[token] = claims
            if len(self._verified) > self.CACHE_SIZE:
                self._verified.popitem(last=False)
        return self._claims(claims)

    def _verify_signature(self, token: str) -> dict[str, Any]:
        if token.startswith("v4.public."):
            claims = self._paseto(token)
        elif token.startswith(("v1.", "v2.", "v3.", "v4.")):
            raise InvalidTokenSignature("only PASETO v4.public tokens are accepted")
        elif token.count(".") == 2:
            claims = self._jwt(token)
        else:
            raise InvalidTokenSignature("the bearer token is neither PASETO v4.public nor a JWT")
        return claims

    def _unverified_iss(self, claims: Any) -> Issuer:
        iss = claims.get("iss") if isinstance(claims, dict) else None
        issuer = self.issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise InvalidTokenSignature("the token's issuer is not on this deployment's allowlist")
        return issuer

    def _paseto(self, token: str) -> dict[str, Any]:
        try:
            body = token.split(".")[2]
            message = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))[:-64]
            issuer = self._unverified_iss(json.loads(message))
            if not issuer.paseto:
                raise InvalidTokenSignature("the token's issuer has no PASETO key")
            verified = pyseto.decode(issuer.paseto, token)
            claims = json.loads(verified.payload)
        except AuthError:
            raise
        except Exception:  # every decode failure is a 401, never a 500
            raise InvalidTokenSignature("PASETO signature verification failed") from None
        if not isinstance(claims, dict):
            raise InvalidToken("the token payload is not a JSON object")
        return claims

    def _jwt(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            alg = header.get("alg")
            if alg not in JWT_ALGORITHMS:
                raise InvalidTokenSignature(f"JWT algorithm {alg!r} is refused: RS256/ES256 only",
                                            details={"alg": str(alg)})  # fmt: skip
            issuer = self._unverified_iss(jwt.decode(token, options={"verify_signature": False}))
            kid = header.get("kid")
            candidates = [k for k in issuer.jwt if k.alg == alg and (kid is None or k.kid in (None, kid))]
            if not candidates:
                raise InvalidTokenSignature("no key of this issuer matches the token's kid/alg")
            for candidate in candidates:
                try:
                    return jwt.decode(token, candidate.key, algorithms=[alg], options={
                        "verify_exp": False, "verify_iat": False, "verify_nbf": False,
                        "verify_aud": False, "verify_iss": False})  # fmt: skip
                except jwt.InvalidSignatureError:
                    continue
            raise InvalidTokenSignature("JWT signature verification failed")
        except AuthError:
            raise
        except Exception:  # PyJWTError, TypeError (wrong key type), ValueError
            raise InvalidTokenSignature("JWT signature verification failed") from None

    def _claims(self, claims: dict[str, Any]) -> dict[str, Any]:
        missing = [c for c in REQUIRED_CLAIMS if c not in claims]
        if missing:
            raise InvalidToken(f"missing required claims {missing}", details={"claims": missing})
        if not all(isinstance(claims[c], str) for c in ("iss", "sub", "jti")):
            raise InvalidToken("iss, sub and jti must be strings")
        for name in DATE_CLAIMS:
            if name in claims and not is_numeric_date(claims[name]):
                raise InvalidToken(f"{name} must be a finite number of seconds since the epoch",
                                   details={"claim": name})  # fmt: skip
        aud = claims["aud"]
        audiences = aud if isinstance(aud, list) else [aud]
        if self.audience not in audiences:
            raise WrongTenant(f"the token is bound to another tenant; this deployment is {self.audience}",
                              details={"expected_aud": self.audience})  # fmt: skip
        now = self._now()
        if claims["exp"] <= now:
            raise ExpiredToken("the token has expired", details={"exp": claims["exp"]})
        if claims["iat"] > now + self.leeway:
            raise InvalidToken("the token's iat is in the future",
                               details={"claim": "iat", "iat": claims["iat"], "leeway_seconds": self.leeway})  # fmt: skip
        if "nbf" in claims and claims["nbf"] > now + self.leeway:
            raise InvalidToken("the token is not valid yet (nbf is in the future)",
                               details={"claim": "nbf", "nbf": claims["nbf"], "leeway_seconds": self.leeway})  # fmt: skip
        limit = ttl_limit(claims["sub"])
        if claims["exp"] > claims["iat"] + limit:  # not exp - iat: a huge int minus a float overflows
            raise InvalidToken(
                f"token lifetime exceeds the maximum ({limit // 3600} h for this kind of subject)",
                details={"claim": "exp", "max_ttl_seconds": limit})  # fmt: skip
        if self.revocations.is_revoked(claims["jti"]):
            raise RevokedToken("the token has been revoked", details={"jti": claims["jti"]})
        for name in ("caps", "scopes"):
            value = claims.get(name)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
                raise InvalidToken(f"{name} must be a list of strings")
        if any("*" in c for c in claims.get("caps") or ()):
            raise InvalidToken("wildcards are not allowed in token caps (§5.2)")
        return claims

    def principal(self, authorization: str | None, actor_header: str | None, *,
                  require_signed: bool, operators: frozenset[str]) -> Principal:  # fmt: skip
        if not authorization:
            if require_signed:
                raise MissingToken("an Authorization: Bearer token is required")
            # unsigned (dev_local only): the caller names itself, and is an operator only when
            # listed as one — a request without the header is refused, not made an operator
            if not actor_header or not ACTOR_ID.fullmatch(actor_header):
                raise ActorMismatch(
                    "unsigned callers must name themselves: send X-Cortex-Actor: type:id "
                    "(e.g. user:alice)", details={"header": "X-Cortex-Actor"})  # fmt: skip
            return Principal(actor=actor_header, tenant=self.tenant, signed=False,
                             operator=actor_header in operators)  # fmt: skip
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise MissingToken("the Authorization header must be 'Bearer <token>'")
        claims = self.verify(token.strip())
        if actor_header is None:
            raise ActorMismatch("the X-Cortex-Actor header is required and must equal the token's sub")
        if actor_header != claims["sub"]:
            raise ActorMismatch("X-Cortex-Actor does not match the token's sub")
        caps = claims.get("caps")
        return Principal(
            actor=claims["sub"], tenant=self.tenant, signed=True,
            caps=tuple(caps) if caps is not None else None,
            scopes=tuple(claims.get("scopes") or ()) or None,
            claims={k: claims[k] for k in ("iss", "sub", "aud", "exp", "iat", "jti")},
            operator=claims["sub"] in operators,
        )  # fmt: skip


# -- the reference issuer (cortexdb token) ----------------------------------------------------
def keygen(directory: str | Path, iss: str = "cortexdb-reference-issuer") -> dict[str, str]:
    """Write an Ed25519 pair (``private.pem`` 0600, ``public.pem``) and ``issuer.json``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    private = ed25519.Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())  # fmt: skip
    public_pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)  # fmt: skip
    path = directory / "private.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem)
    (directory / "public.pem").write_bytes(public_pem)
    (directory / "issuer.json").write_text(json.dumps({"iss": iss}) + "\n")
    return {"iss": iss, "private": str(path), "public": str(directory / "public.pem")}


def check_mint_request(sub: str, caps: list[str] | None, scopes: list[str] | None, ttl: Any,
                       max_ttl: Any = None) -> None:  # fmt: skip
    """Refuse what the verifier would refuse, or what could only be a typo: a capability (in
    ``caps`` or in a ``scopes`` entry ``CAP:PATTERN``) outside the catalog, a TTL that is not a
    positive number of seconds or exceeds ``max_ttl`` (default and ceiling: :func:`ttl_limit`)."""
    limit = ttl_limit(sub)
    why = "24 h for users and agents, 30 d for service: subjects"
    if max_ttl is not None:
        if isinstance(max_ttl, bool) or not isinstance(max_ttl, int) or max_ttl <= 0:
            raise InvalidMintRequest(f"--max-ttl must be a positive number of seconds, not {max_ttl!r}")
        if max_ttl > limit:
            raise InvalidMintRequest(f"--max-ttl {max_ttl} exceeds what the server accepts for {sub!r} "
                                     f"({limit} s)", details={"max_ttl_seconds": limit})  # fmt: skip
        limit, why = max_ttl, "--max-ttl"
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise InvalidMintRequest(f"--ttl must be a positive number of seconds, not {ttl!r}")
    if ttl > limit:
        raise InvalidMintRequest(f"--ttl {ttl} exceeds the maximum of {limit} s for {sub!r} ({why})",
                                 details={"ttl": ttl, "max_ttl_seconds": limit})  # fmt: skip
    for cap in caps or ():
        if "*" in cap:
            raise InvalidMintRequest(f"wildcards are not allowed in token caps (§5.2): {cap!r}")
        if cap not in CAPABILITIES:
            raise InvalidMintRequest(f"unknown capability {cap!r} in --caps", details={"capability": cap})
    for entry in scopes or ():
        cap, sep, pattern = entry.partition(":")
        if not sep or not pattern:
            raise InvalidMintRequest(f"--scopes takes CAP:SCOPE_PATTERN, not {entry!r}")
        if cap not in CAPABILITIES:
            raise InvalidMintRequest(f"unknown capability {cap!r} in --scopes {entry!r}",
                                     details={"capability": cap})  # fmt: skip


def mint(directory: str | Path, *, sub: str, tenant: str, caps: list[str] | None = None,
         scopes: list[str] | None = None, ttl: int = 3600, now: int | None = None,
         jti: str | None = None, extra: dict[str, Any] | None = None,
         max_ttl: int | None = None) -> str:  # fmt: skip
    """A PASETO v4.public token signed with the directory's private key.

    The request is checked first (:func:`check_mint_request`, an :class:`InvalidMintRequest`
    when refused).  ``extra`` claims are added last and unchecked (tests use them to make
    tokens the server must refuse)."""
    check_mint_request(sub, caps, scopes, ttl, max_ttl)
    directory = Path(directory)
    meta = json.loads((directory / "issuer.json").read_text())
    key = pyseto.Key.new(4, "public", (directory / "private.pem").read_bytes())
    issued = int(now if now is not None else dt.datetime.now(dt.UTC).timestamp())
    claims: dict[str, Any] = {
        "iss": meta["iss"], "sub": sub, "aud": f"cortexdb:tenant:{tenant}",
        "iat": issued, "exp": issued + ttl, "jti": jti or secrets.token_hex(16),
    }  # fmt: skip
    if caps is not None:
        claims["caps"] = list(caps)
    if scopes:
        claims["scopes"] = list(scopes)
    claims.update(extra or {})
    return pyseto.encode(key, json.dumps(claims).encode(), serializer=None).decode()
