"""Authentication (§4) and the four-tier policy (§5, Appendix A) over the in-process app."""

from __future__ import annotations

import base64
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from cortexdb import schemas
from cortexdb.errors import IssuerConfigError
from cortexdb.server.policy import PRESETS, Principal, load_preset
from cortexdb.server.settings import ServerSettings

from .server_support import TENANT, body, headers, server


async def test_paseto_and_jwt_tokens_are_accepted(tmp_path):
    async with server(tmp_path) as h:
        for token in (h.keys.paseto("user:alice"), h.keys.jwt("user:alice", "RS256", "rsa1"),
                      h.keys.jwt("user:alice", "ES256", "ec1"), h.keys.jwt("user:alice", "ES256", None)):  # fmt: skip
            response, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(token))
            assert response.status_code == 200, data
            assert data["caller"] == "user:alice" and data["tenant_id"] == TENANT and data["signed"] is True


@pytest.mark.parametrize("case, code", [
    ("missing", "MISSING_TOKEN"), ("not_bearer", "MISSING_TOKEN"), ("garbage", "INVALID_TOKEN_SIGNATURE"),
    ("hs256", "INVALID_TOKEN_SIGNATURE"), ("none", "INVALID_TOKEN_SIGNATURE"),
    ("wrong_key_type", "INVALID_TOKEN_SIGNATURE"), ("tampered_paseto", "INVALID_TOKEN_SIGNATURE"),
    ("tampered_jwt", "INVALID_TOKEN_SIGNATURE"), ("v4_local", "INVALID_TOKEN_SIGNATURE"),
    ("unknown_issuer", "INVALID_TOKEN_SIGNATURE"), ("future_iat", "INVALID_TOKEN"),
    ("too_long", "INVALID_TOKEN"), ("missing_jti", "INVALID_TOKEN"),
    ("foreign_aud", "WRONG_TENANT"), ("expired", "EXPIRED_TOKEN"), ("actor_mismatch", "ACTOR_MISMATCH"),
    ("no_actor_header", "ACTOR_MISMATCH"),
])  # fmt: skip
async def test_token_failures_are_401_with_the_catalog_code(tmp_path, case, code):
    async with server(tmp_path) as h:
        keys = h.keys
        actor = "user:alice"
        auth_header = None
        if case == "not_bearer":
            auth_header = "Basic dXNlcjpwYXNz"
        elif case == "garbage":
            token = "not-a-token"
        elif case == "hs256":
            token = jwt.encode(keys.claims(), "a-shared-secret-of-at-least-32-bytes!!", algorithm="HS256")
        elif case == "none":
            token = jwt.encode(keys.claims(), None, algorithm="none")
        elif case == "wrong_key_type":  # an ES256 token while the issuer's only key is RSA
            token = keys.jwt(alg="ES256", kid="rsa1")
        elif case == "tampered_paseto":
            token = keys.paseto()
            prefix, payload = token[:10], token[10:]
            raw = bytearray(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            raw[:-64] = raw[:-64].replace(b"user:alice", b"user:admin")
            token = prefix + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
            actor = "user:admin"
        elif case == "tampered_jwt":
            head, payload, sig = keys.jwt().split(".")
            claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
            claims["sub"] = "user:admin"
            payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
            token, actor = f"{head}.{payload}.{sig}", "user:admin"
        elif case == "v4_local":
            token = "v4.local.AAAA"
        elif case == "unknown_issuer":
            token = keys.jwt(iss="https://evil.example")
        elif case == "future_iat":
            token = keys.jwt(iat=keys.now() + 3600, exp=keys.now() + 7200)
        elif case == "too_long":
            token = keys.paseto(extra={"exp": keys.now() + 30 * 24 * 3600})  # mint itself refuses the ttl
        elif case == "missing_jti":
            claims = keys.claims()
            del claims["jti"]
            token = jwt.encode(claims, keys.rsa, algorithm="RS256", headers={"kid": "rsa1"})
        elif case == "foreign_aud":
            token = keys.paseto(tenant="globex")
        elif case == "expired":
            token = keys.paseto(now=keys.now() - 7200, ttl=3600)
        elif case in ("actor_mismatch", "no_actor_header"):
            token = keys.paseto("user:bob")
        hdrs = {} if case == "missing" else {"Authorization": auth_header or f"Bearer {token}"}
        if case != "no_actor_header":
            hdrs["X-Cortex-Actor"] = actor
        response, data = await h.call("POST", "/v1/experience", json=body(), hdrs=hdrs)
        assert response.status_code == 401, data
        assert data["error_code"] == code
        assert data["retriable"] is False and data["request_id"] == response.headers["X-Cortex-Request-ID"]
        schemas.validator("error_envelope").validate(data)


def _token(keys, fmt: str, **claims) -> str:
    """A PASETO (claims added unchecked after minting) or an RS256 JWT carrying ``claims``."""
    if fmt == "paseto":
        return keys.paseto(extra=claims)
    return keys.jwt(**claims)


NOT_A_DATE = [float("nan"), float("inf"), float("-inf"), "1778687000", True, None, [1]]


@pytest.mark.parametrize("fmt", ["paseto", "jwt"])
@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
async def test_dates_that_are_not_finite_numbers_are_401_invalid_token(tmp_path, fmt, claim):
    """Python's json writes and reads NaN/Infinity, so both formats can carry them; a NaN exp used
    to never expire (every comparison with NaN is false)."""
    async with server(tmp_path) as h:
        for value in NOT_A_DATE:
            token = _token(h.keys, fmt, **{claim: value})
            response, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(token))
            assert response.status_code == 401, (value, data)
            assert data["error_code"] == "INVALID_TOKEN" and data["details"] == {"claim": claim}, (value, data)
            schemas.validator("error_envelope").validate(data)
            # the token cannot reach the revoke handler (which used to answer int(NaN) with a 500)
            revoke, data = await h.call("POST", "/v1/auth/revoke", json={"jti": "x"}, hdrs=headers(token))
            assert revoke.status_code == 401 and data["error_code"] == "INVALID_TOKEN", (value, data)
        # finite numbers of either JSON kind are accepted
        for value in (h.keys.now() - 10, h.keys.now() - 10.5) if claim != "exp" else (h.keys.now() + 60.5,):
            response, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(_token(h.keys, fmt, **{claim: value})))
            assert response.status_code == 200, (value, data)


@pytest.mark.parametrize("fmt", ["paseto", "jwt"])
async def test_nbf_is_enforced_with_the_leeway(tmp_path, fmt):
    async with server(tmp_path) as h:  # default leeway: 60 s
        now = h.keys.now()
        for nbf, status in ((now - 3600, 200), (now, 200), (now + 59, 200), (now + 60, 200), (now + 61, 401),
                            (now + 600, 401)):  # fmt: skip
            response, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(_token(h.keys, fmt, nbf=nbf)))
            assert response.status_code == status, (nbf - now, data)
            if status == 401:
                assert data["error_code"] == "INVALID_TOKEN"
                assert data["details"] == {"claim": "nbf", "nbf": nbf, "leeway_seconds": 60.0}
        # the same token becomes valid once the clock reaches nbf - leeway
        token = _token(h.keys, fmt, nbf=now + 600)
        h.clock.advance(540)
        response, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(token))
        assert response.status_code == 200, data


@pytest.mark.parametrize("fmt", ["paseto", "jwt"])
async def test_the_leeway_is_a_setting(tmp_path, fmt):
    async with server(tmp_path, token_leeway=5) as h:
        now = h.keys.now()
        for claims, status in (({"nbf": now + 5}, 200), ({"nbf": now + 30}, 401),
                               ({"iat": now + 5, "nbf": now}, 200), ({"iat": now + 30}, 401)):  # fmt: skip
            if fmt == "jwt" and "iat" in claims:
                claims = {**claims, "exp": claims["iat"] + 600}
            response, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(_token(h.keys, fmt, **claims)))
            assert response.status_code == status, (claims, data)
            if status == 401:
                assert data["error_code"] == "INVALID_TOKEN" and data["details"]["leeway_seconds"] == 5.0


def test_leeway_setting_from_env_and_its_bounds():
    assert ServerSettings().token_leeway == 60.0
    assert ServerSettings.from_env({"CORTEX_TOKEN_LEEWAY": "12.5"}).token_leeway == 12.5
    assert ServerSettings.from_env({"CORTEX_TOKEN_LEEWAY": "12"}, token_leeway="0").token_leeway == 0.0
    for bad in ("nan", "inf", "-1", "3601", "soon"):
        with pytest.raises(ValueError, match="token leeway"):
            ServerSettings.from_env({"CORTEX_TOKEN_LEEWAY": bad})


async def test_revoke_with_an_unusable_exp_is_400_not_500(tmp_path):
    async with server(tmp_path) as h:
        root = headers(h.keys.paseto("user:root"), "user:root", **{"Content-Type": "application/json"})
        latest = h.keys.now() + 30 * 24 * 3600 + 60
        for exp in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"10" + b"0" * 40, str(latest + 1).encode(),
                    b'"tomorrow"', b"true", b"[1]"):  # fmt: skip
            raw = b'{"jti": "jti-other", "exp": ' + exp + b"}"
            response = await h.client.open("/v1/auth/revoke", method="POST", headers=root, data=raw)
            data = json.loads(await response.get_data())
            assert response.status_code == 400, (exp, data)
            assert data["error_code"] == "INVALID_BODY", (exp, data)
            # NaN / Infinity literals never reach the handler: the body decoder refuses them
            assert data["details"].get("field") == "exp" or data["details"]["reason"] == "non_finite_number"
            schemas.validator("error_envelope").validate(data)
        assert not h.app.cortex.revocations.is_revoked("jti-other")
        for jti, exp in (("jti-a", latest), ("jti-b", h.keys.now() + 3600.5), ("jti-c", None)):
            doc = {"jti": jti} if exp is None else {"jti": jti, "exp": exp}
            response, data = await h.call("POST", "/v1/auth/revoke", "user:root", json=doc)
            assert response.status_code == 204, data
            assert h.app.cortex.revocations.revoked[jti] == int(exp if exp is not None else latest)


async def test_revoked_jti_is_refused_and_service_tokens_live_longer(tmp_path):
    async with server(tmp_path) as h:
        token = h.keys.paseto("user:alice", jti="jti-alice-1")
        ok, _ = await h.call("GET", "/v1/auth/whoami", hdrs=headers(token))
        assert ok.status_code == 200
        revoked, _ = await h.call("POST", "/v1/auth/revoke", json={"jti": "jti-alice-1", "reason": "rotated"},
                                  hdrs=headers(token))  # fmt: skip
        assert revoked.status_code == 204
        again, data = await h.call("GET", "/v1/auth/whoami", hdrs=headers(token))
        assert again.status_code == 401 and data["error_code"] == "REVOKED_TOKEN"
        # another caller's token: operators only
        other, data = await h.call("POST", "/v1/auth/revoke", "user:bob", json={"jti": "someone-else"})
        assert other.status_code == 403 and data["details"]["capability"] == "auth.revoke"
        service = h.keys.paseto("service:importer", ttl=30 * 24 * 3600)
        response, data = await h.call("GET", "/v1/policy/effective", hdrs=headers(service, "service:importer"))
        assert response.status_code == 200
        denied = {d["capability"]: d["denied_by_tier"] for d in data["denied"]}
        assert denied["forget.gdpr"] == "token" and "scope.write" in data["allowed"]


async def test_unsigned_callers_only_under_dev_local(tmp_path):
    async with server(tmp_path, preset="dev_local") as h:
        response, data = await h.call("POST", "/v1/experience", json=body(), hdrs={"X-Cortex-Actor": "user:alice"})
        assert response.status_code == 202, data
        who, data = await h.call("GET", "/v1/auth/whoami", hdrs={"X-Cortex-Actor": "agent:dev"})
        assert data["caller"] == "agent:dev" and data["signed"] is False
    for preset in ("on_prem_enterprise", "cloud_private", "cloud_shared_saas"):
        async with server(tmp_path / preset, preset=preset) as h:
            response, data = await h.call("GET", "/v1/auth/whoami", hdrs={"X-Cortex-Actor": "user:alice"})
            assert response.status_code == 401 and data["error_code"] == "MISSING_TOKEN"


def test_presets_match_appendix_a():
    """Spot checks of Appendix A for each preset (Y / N / ~ / Y(op))."""
    expected = {
        "on_prem_enterprise": {"scope.create.global": True, "scope.read.cross_tenant": True, "diagnostics.read": True},
        "cloud_shared_saas": {"scope.create.global": False, "scope.create.custom": False,
                              "audit.read.cross_actor": False, "understanding.read.cross_scope": False,
                              "scope.write": True, "forget.gdpr": True, "diagnostics.read": False,
                              "scope.read.descend": False},
        "cloud_private": {"scope.create.global": True, "scope.create.cross_tenant": False,
                          "scope.read.cross_tenant": False, "audit.read.cross_actor": True},
        "dev_local": {"scope.create.global": True, "admin.flush": True, "policy.administer.deployment": True},
    }  # fmt: skip
    from cortexdb.server.policy import PolicyEngine

    for name in PRESETS:
        engine = PolicyEngine(load_preset(name), documents=None, operators=("user:root",))
        alice = Principal(actor="user:alice", tenant=TENANT)
        for capability, allowed in expected[name].items():
            assert engine.decide(alice, capability).allowed is allowed, (name, capability)
        root = Principal(actor="user:root", tenant=TENANT)
        assert engine.decide(root, "admin.flush").allowed
        if name != "dev_local":
            decision = engine.decide(alice, "admin.flush")
            assert not decision.allowed and decision.tier == "deployment"


async def test_cloud_shared_denies_global_scopes_citing_the_deployment_tier(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:
        response, data = await h.call("POST", "/v1/scopes", json={"path": "global:everyone"})
        assert response.status_code == 403
        assert data["error_code"] == "POLICY_DENIED"
        assert data["details"]["capability"] == "scope.create.global"
        assert data["details"]["denied_by_tier"] == "deployment"
        assert data["details"]["deployment_preset"] == "cloud_shared_saas"
        assert response.headers["X-Cortex-Policy"] == "tier=deployment; decision=deny; capability=scope.create.global"
        response, data = await h.call("POST", "/v1/scopes", json={"path": "planet:earth"})
        assert response.status_code == 422 and data["error_code"] == "UNREGISTERED_SCOPE_TYPE"
        assert data["details"]["denied_by_tier"] == "deployment"
        # "~" capabilities: allowed by the deployment, denied by the default tenant policy; without
        # diagnostics.read a recall's diagnostics are stripped, not refused (§5.2), and it says so
        response, data = await h.call("POST", "/v1/recall", json={"scope": "org:acme/user:alice", "query": "x",
                                                                  "diagnostics": "summary"})  # fmt: skip
        assert response.status_code == 200 and "diagnostics" not in data
        assert response.headers["X-Cortex-Warning"] == "diagnostics_stripped"
        response, data = await h.call("POST", "/v1/recall", json={"scope": "org:acme/user:alice", "query": "x"})
        assert "diagnostics" not in data and "X-Cortex-Warning" not in response.headers


async def test_tiers_narrow_monotonically_and_token_caps_only_narrow(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas", enable_experimental=True) as h:
        # a tenant admin turns on a "~" capability, and tries to grant one the deployment denies
        # (an ordinary user may not touch the tenant policy at all)
        grab = {"allow": ["*"]}
        response, data = await h.call("PUT", f"/v1/policy/tenant/{TENANT}", json=grab)
        assert response.status_code == 403 and data["details"]["capability"] == "policy.administer.tenant"
        response, data = await h.call("PUT", f"/v1/policy/tenant/{TENANT}", "user:root",
                                      json={"allow": ["diagnostics.read", "scope.create.global"]})  # fmt: skip
        assert response.status_code == 200, data
        assert response.headers["X-Cortex-Stability"] == "experimental"
        ok, pack = await h.call("POST", "/v1/recall", json={"scope": "org:acme/user:alice", "query": "x",
                                                            "diagnostics": "summary"})  # fmt: skip
        assert ok.status_code == 200, pack
        still, data = await h.call("POST", "/v1/scopes", json={"path": "global:everyone"})
        assert still.status_code == 403 and data["details"]["denied_by_tier"] == "deployment"
        # a scope policy denies writes under a subtree (its owner sets it, once registered); the
        # actor tier denies one actor's reads
        unregistered, data = await h.call("PUT", "/v1/policy/scope/ws:frozen", json={"deny": ["scope.write"]})
        assert unregistered.status_code == 403 and data["error_code"] == "NOT_A_MEMBER"
        await h.call("POST", "/v1/scopes", json={"path": "ws:frozen"})
        put, _ = await h.call("PUT", "/v1/policy/scope/ws:frozen", json={"deny": ["scope.write"]})
        assert put.status_code == 200
        frozen, data = await h.call("POST", "/v1/experience", json=body(scope="ws:frozen/user:alice"))
        assert frozen.status_code == 403 and data["details"]["denied_by_tier"] == "scope"
        await h.call("PUT", "/v1/policy/actor/agent:nosy", "user:root", json={"deny": ["scope.read.*"]})
        nosy, data = await h.call("GET", "/v1/events?scope=org:acme/user:alice", "agent:nosy")
        assert nosy.status_code == 403 and data["details"]["denied_by_tier"] == "actor"
        # token caps narrow (and cannot widen: a cap the deployment denies stays denied)
        narrow = {"caps": ["scope.read.local", "policy.administer.scope", "scope.create.global"]}
        write, data = await h.call("POST", "/v1/experience", json=body(), **narrow)
        assert write.status_code == 403 and data["details"] == {**data["details"], "capability": "scope.write",
                                                                "denied_by_tier": "token"}  # fmt: skip
        widen, data = await h.call("POST", "/v1/scopes", json={"path": "global:x"}, **narrow)
        assert widen.status_code == 403 and data["details"]["denied_by_tier"] == "deployment"
        # token scopes bind a capability to path patterns
        bound = {"scopes": ["scope.write:org:acme/user:alice/*"]}
        inside, _ = await h.call("POST", "/v1/experience", json=body(scope="org:acme/user:alice/agent:x"), **bound)
        outside, data = await h.call("POST", "/v1/experience", json=body(scope="org:acme/user:bob"), **bound)
        assert inside.status_code == 202 and outside.status_code == 403
        assert data["details"]["denied_by_tier"] == "token"


async def test_effective_policy_and_deployment_reads(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:
        response, data = await h.call("GET", "/v1/policy/effective?scope=org:acme/user:alice")
        assert response.status_code == 200
        schemas.validator("capability_set").validate(data)
        assert data["deployment_preset"] == "cloud_shared_saas"
        assert data["rate_limits"] == {"write": "100/s", "read": "500/s"}
        assert {"capability": "scope.create.global", "denied_by_tier": "deployment"} in data["denied"]
        response, data = await h.call("GET", "/v1/policy/deployment")
        assert data["preset"] == "cloud_shared_saas" and "scope.create.global" in data["deny"]
        # policy mutation is experimental: gated on cloud presets unless enabled
        response, data = await h.call("PUT", f"/v1/policy/tenant/{TENANT}", json={"allow": []})
        assert response.status_code == 403 and data["error_code"] == "EXPERIMENTAL_DISABLED"
        # someone else's effective set: those who administer that actor's policy
        response, data = await h.call("GET", "/v1/policy/effective?actor=user:bob")
        assert response.status_code == 403
        response, data = await h.call("GET", "/v1/policy/effective?actor=user:bob", "user:root")
        assert response.status_code == 200 and data["actor"] == "user:bob"


async def test_invalid_policy_documents_are_422(tmp_path):
    async with server(tmp_path) as h:
        for doc in ({"allow": "scope.write"}, {"allow": ["Scope Write"]}, {"grant": []}):
            response, data = await h.call("PUT", "/v1/policy/actor/user:bob", "user:bob", json=doc)
            assert response.status_code == 422 and data["error_code"] == "INVALID_POLICY", data


def _jwk(key, **extra) -> dict:
    if isinstance(key, rsa.RSAPublicKey):
        kind = RSAAlgorithm
    else:
        kind = ECAlgorithm if isinstance(key, ec.EllipticCurvePublicKey) else OKPAlgorithm
    return {**json.loads(kind.to_jwk(key)), **extra}


@pytest.mark.parametrize("case, says", [
    ("rs256_on_ec", "alg RS256 contradicts its key type"), ("es256_on_rsa", "alg ES256 contradicts its key type"),
    ("es256_on_p384", "unsupported EC curve secp384r1"), ("p384_without_alg", "unsupported EC curve secp384r1"),
    ("ed25519_without_alg", "unsupported JWT key type"), ("rs256_on_ed25519", "alg RS256 contradicts"),
    ("not_a_key", "not a usable key"), ("private_key", "a private key"),
])  # fmt: skip
async def test_an_issuer_key_contradicting_its_alg_stops_startup_naming_iss_and_kid(tmp_path, case, says):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    p256 = ec.generate_private_key(ec.SECP256R1()).public_key()
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    okp = ed25519.Ed25519PrivateKey.generate().public_key()
    bad = {"rs256_on_ec": _jwk(p256, alg="RS256"), "es256_on_rsa": _jwk(rsa_key.public_key(), alg="ES256"),
           "es256_on_p384": _jwk(p384, alg="ES256"), "p384_without_alg": _jwk(p384),
           "ed25519_without_alg": _jwk(okp), "rs256_on_ed25519": _jwk(okp, alg="RS256"),
           "not_a_key": {"kty": "RSA", "alg": "RS256"},
           "private_key": {**json.loads(RSAAlgorithm.to_jwk(rsa_key)), "alg": "RS256"}}[case]  # fmt: skip
    jwks = tmp_path / "idp.json"
    good = _jwk(p256, alg="ES256", kid="good")
    hs256 = {"kty": "oct", "k": "c2VjcmV0", "alg": "HS256", "kid": "skipped"}  # never accepted, quietly skipped
    jwks.write_text(json.dumps({"keys": [hs256, good, {**bad, "kid": "k-bad"}]}))
    with pytest.raises(IssuerConfigError) as error:
        async with server(tmp_path, jwt_issuers=[("https://idp.example/other", str(jwks))]):
            pass
    message = error.value.message
    assert "https://idp.example/other" in message and "kid='k-bad'" in message and says in message, message
    assert error.value.details["iss"] == "https://idp.example/other" and error.value.details["kid"] == "k-bad"
    assert "\n" not in message


async def test_a_pem_issuer_key_of_an_unsupported_type_stops_startup(tmp_path):
    for name, key, says in (("ed.pem", ed25519.Ed25519PrivateKey.generate(), "unsupported JWT key type"),
                            ("p384.pem", ec.generate_private_key(ec.SECP384R1()), "unsupported EC curve"),
                            ("junk.pem", None, "not a PEM public key")):  # fmt: skip
        path = tmp_path / name
        path.write_bytes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n" if key is None else
                         key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip
        with pytest.raises(IssuerConfigError) as error:
            async with server(tmp_path / name.split(".")[0], jwt_issuers=[("https://idp.example/pem", str(path))]):
                pass
        assert "--jwt-issuer https://idp.example/pem" in error.value.message and says in error.value.message


async def test_a_jwks_without_alg_fields_still_loads(tmp_path):
    """Keys without alg take it from their type (RSA → RS256, P-256 → ES256); tokens verify."""
    async with server(tmp_path) as h:
        plain = {"keys": [_jwk(h.keys.rsa.public_key(), kid="rsa1"), _jwk(h.keys.ec.public_key(), kid="ec1")]}
        h.keys.jwks.write_text(json.dumps(plain))
    async with server(tmp_path / "again", keys=h.keys) as again:
        for alg, kid in (("RS256", "rsa1"), ("ES256", "ec1")):
            response, data = await again.call("GET", "/v1/auth/whoami", hdrs=headers(h.keys.jwt(alg=alg, kid=kid)))
            assert response.status_code == 200, data
